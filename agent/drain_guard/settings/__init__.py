"""The programs' settings (pure): ``drain-guard run`` (``agent``), ``shield``, ``webhook``;
each built from ``config``'s options, the agent's with the guards they turn on."""
