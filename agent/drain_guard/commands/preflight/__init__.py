"""``drain-guard preflight``: which install fits a cluster, and the installed confinement proven
on it (``run``), one module a concern: the survey of the cluster (``survey``), the identity
probed and how a request is made as it (``probe``), docs/rights.md's rows (``rows``: the table
of requests; ``node_rows``, ``budget_rows``, ``event_rows``, ``account_rows``: how each is made).
"""
