"""The values every program's settings share, and their parsing: durations, listen
addresses, workload references, booleans, build-pod selectors; :class:`SettingsError`."""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from drain_guard.core.pods import ALL_NAMESPACES, DEFAULT_SCOPE, PodScope
from drain_guard.core.selectors import (
    BuildPodSelector,
    SelectorError,
    default_build_pod_selectors,
    is_namespace_name,
    parse_build_pod_selector,
)

_T = TypeVar("_T")


class SettingsError(ValueError):
    """An invalid setting; the message is one line meant for the operator."""


class LogFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class Listen:
    """The HTTP listen address; port 0 asks the kernel for an ephemeral port."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class WorkloadRef:
    """The process's own DaemonSet (the agent) or Deployment (the central shield), looked up
    on SIGTERM to tell an uninstall from a rolling update."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


# The one set of spellings of a boolean, in a flag's value and in the environment alike.
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
BOOL_HELP = "true/false, 1/0, yes/no, on/off"


_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> timedelta:
    """Parse a Go-style duration such as ``90s``, ``45m``, ``1h30m`` or ``1.5s``."""
    text = text.strip()
    if not text:
        raise SettingsError("empty duration")
    pos = 0
    total = 0.0
    for match in _DURATION_RE.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        raise SettingsError(f"invalid duration {text!r} (expected e.g. 90s, 45m, 1h30m)")
    try:
        return timedelta(seconds=total)
    except (OverflowError, ValueError):  # beyond timedelta's range (about 2.7 million years)
        raise SettingsError(f"duration {text!r} is too long") from None


def format_duration(delta: timedelta) -> str:
    """The inverse of :func:`parse_duration`: ``45m``, ``1h30m``, ``1m30s``, ``250ms``."""
    millis = round(delta.total_seconds() * 1000)
    if millis % 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis // 1000, 3600)
    minutes, seconds = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return text + (f"{seconds}s" if seconds or not text else "")


def parse_listen(text: str) -> Listen:
    """Parse ``HOST:PORT`` or ``[IPv6]:PORT``."""
    host, sep, port_text = text.rpartition(":")
    if sep and not host:  # Go's and kubectl's ":PORT"
        raise SettingsError(
            f"invalid listen address {text!r}: name the host, 127.0.0.1{text} for this host"
            f" only, or 0.0.0.0{text} / [::]{text} for every interface (the endpoint is"
            " unauthenticated)"
        )
    if not sep:
        raise SettingsError(f"invalid listen address {text!r} (expected HOST:PORT)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise SettingsError(f"invalid IPv6 address in listen address {text!r}") from None
    elif ":" in host:
        raise SettingsError(f"invalid listen address {text!r} (write IPv6 hosts as [::1]:PORT)")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise SettingsError(f"invalid port in listen address {text!r} (0-65535)")
    return Listen(host, int(port_text))


def parse_workload(flag: str, text: str) -> WorkloadRef:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise SettingsError(f"invalid {flag} {text!r} (expected NAMESPACE/NAME)")
    return WorkloadRef(namespace, name)


def _parse_selector(text: str) -> BuildPodSelector:
    try:
        return parse_build_pod_selector(text)
    except SelectorError as exc:
        raise SettingsError(f"invalid --build-pod-selector: {exc}") from None


def parse_scope(raw: object) -> PodScope:
    if raw is None:
        return DEFAULT_SCOPE
    assert isinstance(raw, list)
    names = [str(n).strip() for n in raw]
    for name in names:
        if name != ALL_NAMESPACES and not is_namespace_name(name):
            raise SettingsError(
                f"invalid --build-pod-namespace {name!r} (a namespace name, or"
                f" '{ALL_NAMESPACES}' for every namespace)"
            )
    return PodScope.with_opt_ins(names)


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise SettingsError(f"invalid value {text!r} (expected {BOOL_HELP})")


def named(flag: str, parse: Callable[[str], _T], text: str) -> _T:
    """``parse(text)``, its error prefixed with the flag it came from."""
    try:
        return parse(text)
    except SettingsError as exc:
        raise SettingsError(f"{flag}: {exc}") from None


def parse_api_stale_after(raw: Mapping[str, object]) -> timedelta:
    api_stale_after = named("--api-stale-after", parse_duration, str(raw["api_stale_after"]))
    if api_stale_after <= timedelta(0):
        raise SettingsError("--api-stale-after must be greater than 0")
    return api_stale_after


def parse_build_pod_selectors(raw: Mapping[str, object]) -> tuple[BuildPodSelector, ...]:
    selectors_raw = raw["build_pod_selector"]
    if selectors_raw is None:
        return default_build_pod_selectors()
    assert isinstance(selectors_raw, list)
    selectors = tuple(_parse_selector(str(s)) for s in selectors_raw)
    if not selectors:
        raise SettingsError("--build-pod-selector given but empty")
    return selectors
