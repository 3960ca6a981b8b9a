"""Kubernetes I/O over kubernetes_asyncio, one module per concern.

- :mod:`.call`: the call wrapper (every non-watch request, its timeout) and its errors;
- :mod:`.credentials`: where the client's credentials come from, read again on a 401;
- :mod:`.retry`: backoff with jitter, and how a run of failures is logged;
- :mod:`.listwatch`: list, then watch, renewed and re-listed, and the cache it fills;
- :mod:`.client`: :class:`~.client.Kube`, the few calls the programs make.

Every request carries a timeout; nothing here polls.
"""
