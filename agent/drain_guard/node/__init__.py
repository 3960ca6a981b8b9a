"""The per-node agent's parts (I/O): the loop that decides and patches the Node
(``controller``), the hold reports and Events it writes, the booted-image reader (``host``) and
the alert source."""
