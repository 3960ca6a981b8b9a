"""What ``/status`` and ``drain-guard status`` show (pure): ``agent`` (``AgentStatus``), a
decision rendered as one (``snapshot``), the operator's hold request and what ends a hold
(``holdrequest``)."""
