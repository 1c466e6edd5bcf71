"""The HTTP world: the endpoint client (client.py), the victim behind an endpoint (endpoint.py),
and the reference server (served.py answers, server.py serves, pyfunc.py exports to MLflow)."""
