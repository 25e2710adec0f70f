"""The operator: kopf handlers (thin), the service they call, reporting, leadership, following."""
