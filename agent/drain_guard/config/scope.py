"""``drain-guard run``'s scope group: which pods may hold a drain (the build pods, in MCO's
namespace and those opted in; the operator's blocking pods, in their namespaces)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from drain_guard.config.blocking import BLOCKING_POD_OPTIONS, blocking_pods
from drain_guard.config.effective import shown_by
from drain_guard.config.options import Option, SettingsGroup, env_name
from drain_guard.config.values import SettingsError, parse_build_pod_selectors, parse_scope
from drain_guard.core.pods import ALL_NAMESPACES, DEFAULT_SCOPE, PodScope
from drain_guard.core.selectors import MCO_NAMESPACE, BuildPodSelector

SCOPE_OPTIONS: tuple[Option, ...] = (
    Option(
        "--build-pod-selector",
        env_name("--build-pod-selector"),
        None,
        "build pods: [NAMESPACE:]LABEL-SELECTOR[@KIND[/NAME]] (repeatable; replaces the"
        " defaults; in the environment separate selectors with ';')",
        repeatable=True,
    ),
    Option(
        "--build-pod-namespace",
        env_name("--build-pod-namespace"),
        None,
        f"let build pods of this namespace hold drains too (repeatable; '{ALL_NAMESPACES}': every"
        f" namespace). Without it only pods of {MCO_NAMESPACE} can: elsewhere any user who can"
        " create a pod could hold drains. The agent then watches pods cluster-wide (still only"
        " its node's) and needs the ClusterRole of docs/install.md; in the environment separate"
        " namespaces with ';'",
        repeatable=True,
    ),
    *BLOCKING_POD_OPTIONS,
)


@dataclass(frozen=True)
class ScopeSettings:
    """The build pods (``--build-pod-selector``) and the namespaces whose pods may hold a drain
    (MCO's, and those opted in); the operator's blocking pods and the namespaces where they
    may run (each read with a Role there)."""

    build_pod_selectors: tuple[BuildPodSelector, ...]
    build_pod_scope: PodScope = field(default=DEFAULT_SCOPE, metadata=shown_by(PodScope.names))
    blocking_pod_selectors: tuple[BuildPodSelector, ...] = ()
    blocking_pod_namespaces: tuple[str, ...] = ()


def scope_settings(raw: Mapping[str, object]) -> ScopeSettings:
    selectors = parse_build_pod_selectors(raw)
    scope = parse_scope(raw["build_pod_namespace"])
    for selector in selectors:
        if selector.namespace is not None and not scope.contains(selector.namespace):
            raise SettingsError(
                f"--build-pod-selector {selector} names namespace {selector.namespace}, outside"
                f" the build-pod scope; opt it in with --build-pod-namespace {selector.namespace}"
            )
    return ScopeSettings(selectors, scope, *blocking_pods(raw))


SCOPE = SettingsGroup("scope", SCOPE_OPTIONS, scope_settings)
