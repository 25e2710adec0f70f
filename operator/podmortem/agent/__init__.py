"""The node agent (a DaemonSet): samples the cgroup memory of watched pods, follows the kernel log for
OOM-kill records, and serves both to the operator as evidence."""
