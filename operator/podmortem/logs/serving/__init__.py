"""The log server: GET /logs over HTTP(S), who may read (TokenReview and SubjectAccessReview), and
login limits.
"""
