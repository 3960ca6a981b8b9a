"""``drain-guard run``'s shield group: whether the agent keeps a PodDisruptionBudget on its
node's build pods, and on their dependencies (docs/shield.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from drain_guard.config.options import Option, SettingsGroup, env_name
from drain_guard.config.values import SettingsError

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


@dataclass(frozen=True)
class ShieldingSettings:
    """Whether the agent keeps budgets on its node's build pods (``--shield-build-pods``) and,
    while a build runs, on their dependencies (``--shield-dependencies``)."""

    build_pods: bool = True
    dependencies: bool = False


def shielding_settings(raw: Mapping[str, object]) -> ShieldingSettings:
    build_pods = bool(raw["shield_build_pods"])
    dependencies = bool(raw["shield_dependencies"])
    if dependencies and not build_pods:
        raise SettingsError("--shield-dependencies needs --shield-build-pods=true")
    return ShieldingSettings(build_pods, dependencies)


SHIELDING = SettingsGroup("shield", SHIELDING_OPTIONS, shielding_settings)
