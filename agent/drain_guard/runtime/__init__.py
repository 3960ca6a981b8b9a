"""What every program runs on: the process life-cycle (``lifecycle``), the HTTP server (its
connections capped: ``connections``, ``door``), the metrics (every program's and the agent's), the
logs, the start-up self-check, and the API health behind ``/readyz``."""
