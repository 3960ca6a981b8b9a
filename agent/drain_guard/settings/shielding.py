"""``drain-guard run``'s shield group: whether the agent keeps a PodDisruptionBudget on its
node's build pods, and on their dependencies (docs/shield.md)."""

from __future__ import annotations

from drain_guard.config.options import Option, env_name

SHIELDING_OPTIONS: tuple[Option, ...] = (
    Option(
        "--shield-build-pods",
        env_name("--shield-build-pods"),
        "true",
        "keep a PodDisruptionBudget on each build pod running on the node, so that a drain"
        " that gets past the hold cannot evict it (docs/shield.md)",
        boolean=True,
    ),
    Option(
        "--shield-dependencies",
        env_name("--shield-dependencies"),
        None,
        "while a build runs, also shield the machine-os-builder and image registry pods on the"
        " node (off: their budgets outlive a dead agent; docs/shield.md)",
        boolean=True,
    ),
)
