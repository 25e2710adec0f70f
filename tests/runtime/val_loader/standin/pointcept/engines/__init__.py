"""STAND-IN for pointcept.engines (tests only)."""
