"""The Kubernetes API server simulator: HTTP API, storage, watches, authorization, admission.

It imports nothing from the actors or the harness: it serves whatever client talks to it."""
