"""What every program runs on: the process life-cycle (``lifecycle``), the HTTP server, the
metrics, the logs, the start-up self-check, and the API health behind ``/readyz``."""
