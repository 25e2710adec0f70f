"""Pod logs that survive stream cuts, restarts and pod deletion, with exact resume."""
