"""Following a pod's log through the API: the follower, its API calls, the pod's state and the sinks
lines are written to. Never imports the store or its server.
"""
