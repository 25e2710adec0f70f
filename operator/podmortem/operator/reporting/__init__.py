"""The reporting side of the operator: evidence from the agent and Prometheus, the report and its
follow-ups, job sections, the page route. Never reaches up into the watching side.
"""
