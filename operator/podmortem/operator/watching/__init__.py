"""The watching side of the operator: kopf handlers, the service they call, the early warning,
leadership, and assembling it all (run).
"""
