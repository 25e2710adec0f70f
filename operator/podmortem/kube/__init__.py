"""Kubernetes access shared by the operator, the node agent and the CLI: configuration and clients."""
