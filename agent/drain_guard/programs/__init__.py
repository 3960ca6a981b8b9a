"""The programs, each a thin entry on ``runtime.lifecycle``: ``runner`` (``drain-guard run``,
the per-node agent), ``central`` (``drain-guard shield``), ``webhook``, ``nodeproxy``."""
