"""Allow ``python -m drain_guard``."""

from drain_guard.cli import main

raise SystemExit(main())
