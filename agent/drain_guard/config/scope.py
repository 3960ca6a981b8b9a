"""``drain-guard run``'s scope group: which pods may hold a drain (the build pods, in MCO's
namespace and those opted in; the operator's blocking pods, in their namespaces)."""

from __future__ import annotations

from drain_guard.config.blocking import BLOCKING_POD_OPTIONS
from drain_guard.config.options import Option, env_name
from drain_guard.core.pods import ALL_NAMESPACES
from drain_guard.core.selectors import MCO_NAMESPACE

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
