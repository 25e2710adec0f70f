"""STAND-IN for pointcept.utils (tests only)."""
