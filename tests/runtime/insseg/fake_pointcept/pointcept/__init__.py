"""Stand-in for Pointcept (test-only): see ../README.md. Mirrors the real names, not the real bodies."""
