"""The programs' settings (pure): ``drain-guard run`` (``agent``, with the groups that have a
module of their own: ``host``, ``install``), ``shield``, ``webhook``; each built from ``config``'s
options, the agent's with the guards they turn on."""
