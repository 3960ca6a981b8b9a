"""The per-node agent's parts (I/O): the loop that decides and patches the Node
(``controller``, with what it reads: ``loop_settings``, ``watches``, ``interfaces``), the hold
reports and Events it writes, a failing release's escalation, ``--observe-only``'s counts, the
booted-image reader (``host``) and the alert source."""
