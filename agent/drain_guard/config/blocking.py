"""Blocking pods' settings: the operator-declared pods that hold their node's drains, and the
namespaces where they may run."""

from __future__ import annotations

from collections.abc import Mapping

from drain_guard.config.options import Option, env_name
from drain_guard.config.values import SettingsError, named
from drain_guard.core.selectors import (
    BuildPodSelector,
    SelectorError,
    is_namespace_name,
    parse_build_pod_selector,
)

#: ``drain-guard run``'s blocking-pod flags.
BLOCKING_POD_OPTIONS: tuple[Option, ...] = (
    Option(
        "--blocking-pod-selector",
        env_name("--blocking-pod-selector"),
        None,
        "pods whose Running presence on the node holds its drains (reason blocking-pod):"
        " [NAMESPACE:]LABEL-SELECTOR[@KIND[/NAME]] (repeatable; in the environment separate"
        " selectors with ';'); only in the namespaces of --blocking-pod-namespace",
        repeatable=True,
    ),
    Option(
        "--blocking-pod-namespace",
        env_name("--blocking-pod-namespace"),
        None,
        "a namespace whose pods --blocking-pod-selector may match (repeatable, required with"
        " it; no '*'): everyone who can create pods there can hold drains. The agent watches"
        " its node's pods there with a Role in that namespace (docs/install.md); in the"
        " environment separate namespaces with ';'",
        repeatable=True,
    ),
)


def blocking_pods(
    raw: Mapping[str, object],
) -> tuple[tuple[BuildPodSelector, ...], tuple[str, ...]]:
    """The blocking pods' selectors and the namespaces where they may run (none: off)."""
    texts = raw["blocking_pod_selector"]
    names = raw["blocking_pod_namespace"]
    if texts is None:
        if names is not None:
            raise SettingsError("--blocking-pod-namespace needs --blocking-pod-selector")
        return (), ()
    assert isinstance(texts, list)
    selectors = tuple(named("--blocking-pod-selector", _parse_pod_selector, str(t)) for t in texts)
    if not selectors:
        raise SettingsError("--blocking-pod-selector given but empty")
    if names is None:
        raise SettingsError(
            "--blocking-pod-selector needs --blocking-pod-namespace: the namespaces where"
            " blocking pods may run (each needs the Role of docs/install.md)"
        )
    assert isinstance(names, list)
    namespaces = tuple(dict.fromkeys(str(n).strip() for n in names))
    for name in namespaces:
        if not is_namespace_name(name):
            raise SettingsError(
                f"invalid --blocking-pod-namespace {name!r} (a namespace name; there is no"
                " '*': blocking pods are read namespace by namespace, never cluster-wide)"
            )
    for selector in selectors:
        if selector.namespace is not None and selector.namespace not in namespaces:
            raise SettingsError(
                f"--blocking-pod-selector {selector} names namespace {selector.namespace}; opt"
                f" it in with --blocking-pod-namespace {selector.namespace}"
            )
    return selectors, namespaces


def _parse_pod_selector(text: str) -> BuildPodSelector:
    try:
        return parse_build_pod_selector(text)
    except SelectorError as exc:
        raise SettingsError(str(exc).replace("build-pod selector", "selector")) from None
