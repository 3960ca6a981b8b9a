"""The options the programs' settings are made of, from flags and the environment, validated;
one module per concern. Below the guards, which declare their own options with it; the
programs' settings, which build the guards, are in :mod:`drain_guard.settings`.

- :mod:`.values`: the shared values and their parsing (durations, listen addresses, booleans,
  selectors) and :class:`~.values.SettingsError`;
- :mod:`.options`: the env-or-flag mechanism, one table of options per program;
- :mod:`.alerts`: alert gating's options and settings;
- :mod:`.blocking`: blocking pods' options.

Flags win over environment variables, which win over defaults. Every flag ``--some-flag`` has
the variable ``DRAIN_GUARD_SOME_FLAG``, except ``--node-name`` (``NODE_NAME``) and ``--pod-name``
(``POD_NAME``), what a DaemonSet gets from the downward API, and ``--kubeconfig``
(``KUBECONFIG``, as kubectl). Validation
raises :class:`~.values.SettingsError` with one human sentence; the CLI prints it on one line
and exits 2, so a bad manifest shows up as one readable log line rather than a traceback.
"""
