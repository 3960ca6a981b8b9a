"""The build-pod shield: the pure plan (``plan``, kept current by ``replan``) and the I/O that
watches the pods and budgets and applies it (``loop``); docs/shield.md."""
