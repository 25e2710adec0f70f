"""The kernel's side of a kill: OOM records parsed from log text, and /dev/kmsg read as it is written."""
