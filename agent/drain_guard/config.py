"""Settings of ``drain-guard run`` (and ``drain-guard shield``) from flags and the
environment, validated.

Flags win over environment variables, which win over defaults. Every flag ``--some-flag`` has
the variable ``DRAIN_GUARD_SOME_FLAG``, except ``--node-name`` (``NODE_NAME``) and ``--pod-name``
(``POD_NAME``), what a DaemonSet gets from the downward API, and ``--kubeconfig``
(``KUBECONFIG``, as kubectl). Validation
raises :class:`SettingsError` with one human sentence; the CLI prints it on one line and
exits 2, so a bad manifest shows up as one readable log line rather than a traceback.
"""

from __future__ import annotations

import argparse
import enum
import ipaddress
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from drain_guard.alerts import AlertApi, AlertFilter, OnUnreachable
from drain_guard.pods import ALL_NAMESPACES, DEFAULT_SCOPE, PodScope
from drain_guard.selectors import (
    MCO_NAMESPACE,
    BuildPodSelector,
    SelectorError,
    default_build_pod_selectors,
    is_namespace_name,
    parse_build_pod_selector,
)

ENV_PREFIX = "DRAIN_GUARD_"
DEFAULT_LISTEN = "127.0.0.1:9797"
DEFAULT_SHIELD_LISTEN = "127.0.0.1:9798"
# The MCD gives up waiting for a drain after one hour (Degraded, FailedToDrain). A hold that
# long would turn "drain later" into "node degraded", and the drain itself needs time after
# the release, so holds of an hour or more are refused outright rather than merely warned.
MCD_DRAIN_TIMEOUT = timedelta(hours=1)
# Environment lists of selectors are split on ";" because a selector itself contains commas.
SELECTOR_ENV_SEPARATOR = ";"


_T = TypeVar("_T")


class SettingsError(ValueError):
    """An invalid setting; the message is one line meant for the operator."""


class LogFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


class BootedImageSource(enum.StrEnum):
    OSTREE = "ostree"
    RPM_OSTREE = "rpm-ostree"


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


@dataclass(frozen=True)
class AlertSettings:
    """Alert gating (``--alert-url`` and its companions): where to ask, what counts, and what
    an unanswered query means."""

    url: str
    api: AlertApi
    filter: AlertFilter
    interval: timedelta
    on_unreachable: OnUnreachable
    token_file: str | None = None
    ca_file: str | None = None

    @property
    def timeout(self) -> timedelta:
        """How long one query may take: the interval, at most ``MAX_ALERT_TIMEOUT``."""
        return min(self.interval, MAX_ALERT_TIMEOUT)

    def effective(self) -> dict[str, object]:
        return {
            "url": self.url,
            "api": self.api.value,
            "filter": str(self.filter),
            "interval": format_duration(self.interval),
            "onUnreachable": self.on_unreachable.value,
            "tokenFile": self.token_file,
            "caFile": self.ca_file,
        }


#: The longest an alert query may take before it counts as unanswered.
MAX_ALERT_TIMEOUT = timedelta(seconds=10)


@dataclass(frozen=True)
class Settings:
    """Everything ``drain-guard run`` needs, already validated."""

    node_name: str
    kubeconfig: str | None
    host_root: str
    cmdline_file: str
    booted_image_source: BootedImageSource
    rpm_ostree_command: tuple[str, ...]
    listen: Listen
    max_hold: timedelta
    build_pod_selectors: tuple[BuildPodSelector, ...]
    daemonset: WorkloadRef | None
    release_on_exit: bool
    log_format: LogFormat
    log_level: str
    #: The namespaces whose pods may hold a drain (MCO's, and those opted in).
    build_pod_scope: PodScope = DEFAULT_SCOPE
    shield_build_pods: bool = True
    shield_dependencies: bool = False
    api_stale_after: timedelta = timedelta(minutes=10)
    confinement_check_interval: timedelta = timedelta(minutes=10)
    observe_only: bool = False
    pod_name: str | None = None
    api_socket: str | None = None
    alerts: AlertSettings | None = None
    #: Operator-declared blocking pods, and the namespaces where they may run (each read
    #: with a Role there).
    blocking_pod_selectors: tuple[BuildPodSelector, ...] = ()
    blocking_pod_namespaces: tuple[str, ...] = ()

    def effective(self) -> dict[str, object]:
        """The settings in force, for the agent's start-up line (durations as flags take them)."""
        return {
            "node": self.node_name,
            "kubeconfig": f"node proxy {self.api_socket}"
            if self.api_socket
            else self.kubeconfig or "in-cluster, else ~/.kube/config",
            "listen": str(self.listen),
            "maxHold": format_duration(self.max_hold),
            "apiStaleAfter": format_duration(self.api_stale_after),
            "confinementCheckInterval": format_duration(self.confinement_check_interval),
            "buildPodSelectors": [str(s) for s in self.build_pod_selectors],
            "buildPodScope": self.build_pod_scope.names(),
            "bootedImageSource": self.booted_image_source.value,
            "shieldBuildPods": self.shield_build_pods,
            "shieldDependencies": self.shield_dependencies,
            "onExit": f"daemonset {self.daemonset}"
            if self.daemonset is not None
            else ("release" if self.release_on_exit else "keep holds"),
            "observeOnly": self.observe_only,
            "alerts": None if self.alerts is None else self.alerts.effective(),
            "blockingPodSelectors": [str(s) for s in self.blocking_pod_selectors],
            "blockingPodNamespaces": list(self.blocking_pod_namespaces),
            "logLevel": self.log_level,
        }


@dataclass(frozen=True)
class _Option:
    """One flag: its environment variable and default; the single table the docs test reads."""

    flag: str
    env: str
    default: str | None
    help: str
    choices: tuple[str, ...] | None = None
    repeatable: bool = False
    boolean: bool = False


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.removeprefix("--").replace("-", "_").upper()


RUN_OPTIONS: tuple[_Option, ...] = (
    _Option("--node-name", "NODE_NAME", None, "name of the Node this agent guards (required)"),
    _Option(
        "--kubeconfig",
        "KUBECONFIG",
        None,
        "kubeconfig file; without it the in-cluster config, else ~/.kube/config",
    ),
    _Option(
        "--api-socket",
        _env_name("--api-socket"),
        None,
        "Unix socket of drain-guard node-proxy (the systemd install): every API request goes"
        " there, with no credential of the agent's own, and the proxy passes on only this"
        " Node's reads, hold, release and Events (docs/install.md, section 7); excludes"
        " --kubeconfig",
    ),
    _Option(
        "--pod-name",
        "POD_NAME",
        None,
        "this agent's pod (downward API metadata.name); with --daemonset, checked at start to"
        " be that DaemonSet's",
    ),
    _Option("--host-root", _env_name("--host-root"), "/", "where the host's / is mounted"),
    _Option(
        "--cmdline-file",
        _env_name("--cmdline-file"),
        "/proc/cmdline",
        "kernel command line naming the booted ostree deployment (read as is, not under"
        " --host-root)",
    ),
    _Option(
        "--booted-image-source",
        _env_name("--booted-image-source"),
        BootedImageSource.OSTREE.value,
        "where the booted image comes from",
        choices=tuple(s.value for s in BootedImageSource),
    ),
    _Option(
        "--rpm-ostree-command",
        _env_name("--rpm-ostree-command"),
        "rpm-ostree",
        "command (shell words) for --booted-image-source rpm-ostree",
    ),
    _Option(
        "--listen",
        _env_name("--listen"),
        DEFAULT_LISTEN,
        "HOST:PORT of the status/metrics endpoint (port 0: any free port)",
    ),
    _Option(
        "--max-hold",
        _env_name("--max-hold"),
        "45m",
        "longest hold, e.g. 90s, 30m, 50m; must be below 1h (the MCD's drain timeout)",
    ),
    _Option(
        "--api-stale-after",
        _env_name("--api-stale-after"),
        "10m",
        "/readyz fails when the API server has not answered for this long (watch events and"
        " bookmarks count)",
    ),
    _Option(
        "--confinement-check-interval",
        _env_name("--confinement-check-interval"),
        "10m",
        "how often the confinement self-check runs again after the start (a dry-run write to"
        " another Node and a dry-run TokenRequest for another account must be denied)",
    ),
    _Option(
        "--build-pod-selector",
        _env_name("--build-pod-selector"),
        None,
        "build pods: [NAMESPACE:]LABEL-SELECTOR[@KIND[/NAME]] (repeatable; replaces the"
        " defaults; in the environment separate selectors with ';')",
        repeatable=True,
    ),
    _Option(
        "--build-pod-namespace",
        _env_name("--build-pod-namespace"),
        None,
        f"let build pods of this namespace hold drains too (repeatable; '{ALL_NAMESPACES}': every"
        f" namespace). Without it only pods of {MCO_NAMESPACE} can: elsewhere any user who can"
        " create a pod could hold drains. The agent then watches pods cluster-wide (still only"
        " its node's) and needs the ClusterRole of docs/install.md; in the environment separate"
        " namespaces with ';'",
        repeatable=True,
    ),
    _Option(
        "--blocking-pod-selector",
        _env_name("--blocking-pod-selector"),
        None,
        "pods whose Running presence on the node holds its drains (reason blocking-pod):"
        " [NAMESPACE:]LABEL-SELECTOR[@KIND[/NAME]] (repeatable; in the environment separate"
        " selectors with ';'); only in the namespaces of --blocking-pod-namespace",
        repeatable=True,
    ),
    _Option(
        "--blocking-pod-namespace",
        _env_name("--blocking-pod-namespace"),
        None,
        "a namespace whose pods --blocking-pod-selector may match (repeatable, required with"
        " it; no '*'): everyone who can create pods there can hold drains. The agent watches"
        " its node's pods there with a Role in that namespace (docs/install.md); in the"
        " environment separate namespaces with ';'",
        repeatable=True,
    ),
    _Option(
        "--daemonset",
        _env_name("--daemonset"),
        None,
        "NAMESPACE/NAME of the agent's DaemonSet: on SIGTERM holds are released only if it is"
        " gone or being deleted",
    ),
    _Option(
        "--release-on-exit",
        _env_name("--release-on-exit"),
        None,
        "release holds on SIGTERM/SIGINT (for systemd, where there is no DaemonSet)",
        boolean=True,
    ),
    _Option(
        "--shield-build-pods",
        _env_name("--shield-build-pods"),
        "true",
        "keep a PodDisruptionBudget on each build pod running on the node, so that a drain"
        " that gets past the hold cannot evict it (docs/shield.md)",
        boolean=True,
    ),
    _Option(
        "--shield-dependencies",
        _env_name("--shield-dependencies"),
        None,
        "while a build runs, also shield the machine-os-builder and image registry pods on the"
        " node (off: their budgets outlive a dead agent; docs/shield.md)",
        boolean=True,
    ),
    _Option(
        "--observe-only",
        _env_name("--observe-only"),
        None,
        "decide as usual but write nothing (no Node patch, no budget, no Event): report what"
        " would have been done in the log, /status and metrics, for a first rollout",
        boolean=True,
    ),
    _Option(
        "--alert-url",
        _env_name("--alert-url"),
        None,
        "hold drains while alerts matching --alert-filter fire: base URL of Prometheus, the"
        " Thanos querier (OpenShift: https://thanos-querier.openshift-monitoring.svc:9091) or"
        " Alertmanager (--alert-api alertmanager); queried once per --alert-interval",
    ),
    _Option(
        "--alert-api",
        _env_name("--alert-api"),
        AlertApi.PROMETHEUS.value,
        "the API of --alert-url: prometheus (GET api/v1/alerts; Thanos querier too) or"
        " alertmanager (GET api/v2/alerts, silenced and inhibited alerts left out)",
        choices=tuple(a.value for a in AlertApi),
    ),
    _Option(
        "--alert-filter",
        _env_name("--alert-filter"),
        None,
        "regular expression (Python re, searched) on the alertname of the firing alerts that"
        " hold drains; required with --alert-url (anchor it, ^(A|B)$, for whole names)",
    ),
    _Option(
        "--alert-token-file",
        _env_name("--alert-token-file"),
        None,
        "file holding the bearer token of the alert queries, read before each (a projected"
        " service-account token rotates); https only",
    ),
    _Option(
        "--alert-ca-file",
        _env_name("--alert-ca-file"),
        None,
        "CA bundle (PEM) that signs --alert-url's certificate, read before each query"
        " (OpenShift: the service CA); without it the system's CAs",
    ),
    _Option(
        "--alert-interval",
        _env_name("--alert-interval"),
        "30s",
        "how often the alerts are queried (one GET per interval per agent; at least 1s)",
    ),
    _Option(
        "--alert-unreachable",
        _env_name("--alert-unreachable"),
        OnUnreachable.HOLD.value,
        "what a failed alert query means while it lasts: hold (drains wait, within"
        " --max-hold) or pass (drains go on); either way /status and"
        " drain_guard_alert_query_up report it",
        choices=tuple(o.value for o in OnUnreachable),
    ),
    _Option(
        "--log-format",
        _env_name("--log-format"),
        LogFormat.TEXT.value,
        "log line format",
        choices=tuple(f.value for f in LogFormat),
    ),
    _Option(
        "--log-level",
        _env_name("--log-level"),
        "INFO",
        "log level",
        choices=LOG_LEVELS,
    ),
)

#: The shortest --alert-interval (docs/benchmarks.md has the load of an interval per node).
MIN_ALERT_INTERVAL = timedelta(seconds=1)


def _run_option(flag: str) -> _Option:
    return next(opt for opt in RUN_OPTIONS if opt.flag == flag)


def default_max_hold() -> timedelta:
    """``--max-hold``'s default, defined once in ``RUN_OPTIONS``; ``drain-guard demo`` hands it
    to the simulator's demo, which cannot import the agent."""
    default = _run_option("--max-hold").default
    assert default is not None
    return parse_duration(default)


#: ``drain-guard shield``: the flags it shares with ``run`` mean the same there.
SHIELD_OPTIONS: tuple[_Option, ...] = (
    _run_option("--kubeconfig"),
    _Option(
        "--listen",
        _env_name("--listen"),
        DEFAULT_SHIELD_LISTEN,
        "HOST:PORT of the status/metrics endpoint (port 0: any free port)",
    ),
    _run_option("--api-stale-after"),
    _Option(
        "--build-pod-selector",
        _env_name("--build-pod-selector"),
        None,
        f"build pods: [{MCO_NAMESPACE}:]LABEL-SELECTOR[@KIND[/NAME]] (repeatable; replaces the"
        " defaults; in the environment separate selectors with ';'); only pods of"
        f" {MCO_NAMESPACE} are shielded",
        repeatable=True,
    ),
    _Option(
        "--deployment",
        _env_name("--deployment"),
        None,
        "NAMESPACE/NAME of the shield's own Deployment, checked at start to exist: on"
        " SIGTERM the budgets are removed only if it is gone or being deleted (uninstall)",
    ),
    _run_option("--log-format"),
    _run_option("--log-level"),
)


@dataclass(frozen=True)
class ShieldSettings:
    """Everything ``drain-guard shield`` needs, already validated."""

    kubeconfig: str | None
    listen: Listen
    api_stale_after: timedelta
    build_pod_selectors: tuple[BuildPodSelector, ...]
    deployment: WorkloadRef | None
    log_format: LogFormat
    log_level: str

    def effective(self) -> dict[str, object]:
        """The settings in force, for the start-up line."""
        return {
            "kubeconfig": self.kubeconfig or "in-cluster, else ~/.kube/config",
            "listen": str(self.listen),
            "apiStaleAfter": format_duration(self.api_stale_after),
            "buildPodSelectors": [str(s) for s in self.build_pod_selectors],
            "onExit": "keep budgets"
            if self.deployment is None
            else f"deployment {self.deployment}",
            "logLevel": self.log_level,
        }


# The one set of spellings of a boolean, in a flag's value and in the environment alike.
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_BOOL_HELP = "true/false, 1/0, yes/no, on/off"


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``run`` flags; defaults stay ``None`` so the environment can fill them."""
    _add_arguments(parser, RUN_OPTIONS)


def add_shield_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``shield`` flags, as :func:`add_run_arguments` does."""
    _add_arguments(parser, SHIELD_OPTIONS)


def _add_arguments(parser: argparse.ArgumentParser, options: tuple[_Option, ...]) -> None:
    for opt in options:
        dest = opt.flag.removeprefix("--").replace("-", "_")
        default_text = f" (default: {opt.default})" if opt.default is not None else ""
        helptext = f"{opt.help}{default_text} [env {opt.env}]"
        if opt.boolean and opt.default is None:  # a switch: present means true
            parser.add_argument(
                opt.flag, dest=dest, action="store_true", default=None, help=helptext
            )
        elif opt.boolean:
            parser.add_argument(
                opt.flag, dest=dest, default=None, metavar="BOOL", help=f"{helptext} ({_BOOL_HELP})"
            )
        elif opt.repeatable:
            parser.add_argument(opt.flag, dest=dest, action="append", default=None, help=helptext)
        else:
            metavar = None if opt.choices is None else "{" + ",".join(opt.choices) + "}"
            parser.add_argument(opt.flag, dest=dest, default=None, metavar=metavar, help=helptext)


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


def _parse_scope(raw: object) -> PodScope:
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


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise SettingsError(f"invalid value {text!r} (expected {_BOOL_HELP})")


def _flag_pattern(flag: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Merge flags (``args``), environment and defaults into validated :class:`Settings`.

    An error about a value taken from the environment names the variable, not the flag: the
    operator has to find it in a manifest or unit file, not on a command line.
    """
    return _validated(RUN_OPTIONS, args, environ, _settings)


def shield_settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> ShieldSettings:
    """:func:`settings_from` for ``drain-guard shield``."""
    return _validated(SHIELD_OPTIONS, args, environ, _shield_settings)


def _validated(
    options: tuple[_Option, ...],
    args: argparse.Namespace,
    environ: Mapping[str, str],
    build: Callable[[dict[str, object]], _T],
) -> _T:
    from_env: list[_Option] = []
    try:
        return build(_merge(options, args, environ, from_env))
    except SettingsError as exc:
        message = str(exc)
        for opt in from_env:
            message = _flag_pattern(opt.flag).sub(opt.env, message)
        raise SettingsError(message) from None


def _named(flag: str, parse: Callable[[str], _T], text: str) -> _T:
    """``parse(text)``, its error prefixed with the flag it came from."""
    try:
        return parse(text)
    except SettingsError as exc:
        raise SettingsError(f"{flag}: {exc}") from None


def _merge(
    options: tuple[_Option, ...],
    args: argparse.Namespace,
    environ: Mapping[str, str],
    from_env: list[_Option],
) -> dict[str, object]:
    """Each option's value: the flag, else the variable, else the default (checked choices,
    parsed booleans); the options taken from the environment are added to ``from_env``."""
    raw: dict[str, object] = {}
    for opt in options:
        dest = opt.flag.removeprefix("--").replace("-", "_")
        value: object = getattr(args, dest, None)
        if value is None and environ.get(opt.env, "") != "":  # empty: as if unset
            from_env.append(opt)
            env_text = environ[opt.env]
            if opt.repeatable:
                value = [s.strip() for s in env_text.split(SELECTOR_ENV_SEPARATOR) if s.strip()]
            else:
                value = env_text
        if value is None:
            value = opt.default
        if opt.boolean and isinstance(value, str):
            value = _named(opt.flag, _parse_bool, value)
        if opt.choices is not None and value is not None:
            wanted = str(value).upper() if opt.flag == "--log-level" else str(value)
            if wanted not in opt.choices:
                raise SettingsError(
                    f"invalid {opt.flag} {value!r} (choose from {', '.join(opt.choices)})"
                )
            value = wanted
        raw[dest] = value
    return raw


def _settings(raw: dict[str, object]) -> Settings:
    node_name = str(raw["node_name"] or "").strip()
    if not node_name:
        raise SettingsError("--node-name (or NODE_NAME) is required")

    max_hold = _named("--max-hold", parse_duration, str(raw["max_hold"]))
    if max_hold <= timedelta(0):
        raise SettingsError("--max-hold must be greater than 0")
    if max_hold >= MCD_DRAIN_TIMEOUT:
        raise SettingsError(
            f"--max-hold {raw['max_hold']} is not below 1h: the MCD marks the node Degraded"
            " after waiting 1h for a drain"
        )

    api_stale_after = _api_stale_after(raw)
    confinement_check_interval = _named(
        "--confinement-check-interval",
        parse_duration,
        str(raw["confinement_check_interval"]),
    )
    if confinement_check_interval <= timedelta(0):
        raise SettingsError("--confinement-check-interval must be greater than 0")
    selectors = _selectors(raw)
    scope = _parse_scope(raw["build_pod_namespace"])
    for selector in selectors:
        if selector.namespace is not None and not scope.contains(selector.namespace):
            raise SettingsError(
                f"--build-pod-selector {selector} names namespace {selector.namespace}, outside"
                f" the build-pod scope; opt it in with --build-pod-namespace {selector.namespace}"
            )

    command = _split_command(str(raw["rpm_ostree_command"]))
    daemonset = (
        None if raw["daemonset"] is None else parse_workload("--daemonset", str(raw["daemonset"]))
    )
    release_on_exit = bool(raw["release_on_exit"])
    if daemonset is not None and release_on_exit:
        raise SettingsError(
            "--daemonset and --release-on-exit exclude each other (DaemonSet or systemd)"
        )
    pod_name = str(raw["pod_name"] or "").strip() or None
    if daemonset is not None and pod_name is None:
        raise SettingsError(
            "--daemonset needs --pod-name (POD_NAME from the downward API) to check at start"
            " that the DaemonSet owns this pod"
        )
    shield_build_pods = bool(raw["shield_build_pods"])
    shield_dependencies = bool(raw["shield_dependencies"])
    if shield_dependencies and not shield_build_pods:
        raise SettingsError("--shield-dependencies needs --shield-build-pods=true")
    kubeconfig = raw["kubeconfig"]
    api_socket = str(raw["api_socket"] or "").strip() or None
    if api_socket is not None and kubeconfig is not None:
        raise SettingsError(
            "--api-socket excludes --kubeconfig: through the node proxy the agent holds no"
            " credential"
        )
    return Settings(
        node_name=node_name,
        kubeconfig=None if kubeconfig is None else str(kubeconfig),
        host_root=str(raw["host_root"]),
        cmdline_file=str(raw["cmdline_file"]),
        booted_image_source=BootedImageSource(str(raw["booted_image_source"])),
        rpm_ostree_command=command,
        listen=_named("--listen", parse_listen, str(raw["listen"])),
        max_hold=max_hold,
        build_pod_selectors=selectors,
        build_pod_scope=scope,
        daemonset=daemonset,
        release_on_exit=release_on_exit,
        log_format=LogFormat(str(raw["log_format"])),
        log_level=str(raw["log_level"]),
        shield_build_pods=shield_build_pods,
        shield_dependencies=shield_dependencies,
        api_stale_after=api_stale_after,
        confinement_check_interval=confinement_check_interval,
        observe_only=bool(raw["observe_only"]),
        pod_name=pod_name,
        api_socket=api_socket,
        alerts=_alert_settings(raw),
        **_blocking(raw),
    )


def _blocking(raw: Mapping[str, object]) -> dict[str, Any]:
    texts = raw["blocking_pod_selector"]
    names = raw["blocking_pod_namespace"]
    if texts is None:
        if names is not None:
            raise SettingsError("--blocking-pod-namespace needs --blocking-pod-selector")
        return {}
    assert isinstance(texts, list)
    selectors = tuple(_named("--blocking-pod-selector", _parse_pod_selector, str(t)) for t in texts)
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
    return {"blocking_pod_selectors": selectors, "blocking_pod_namespaces": namespaces}


def _parse_pod_selector(text: str) -> BuildPodSelector:
    try:
        return parse_build_pod_selector(text)
    except SelectorError as exc:
        raise SettingsError(str(exc).replace("build-pod selector", "selector")) from None


_ALERT_COMPANIONS = ("alert_filter", "alert_token_file", "alert_ca_file")


def _alert_settings(raw: Mapping[str, object]) -> AlertSettings | None:
    url = str(raw["alert_url"] or "").strip()
    if not url:
        given = [name for name in _ALERT_COMPANIONS if raw[name] is not None]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise SettingsError(f"{flag} needs --alert-url (where to query the alerts)")
        return None
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https") or not rest.split("/")[0]:
        raise SettingsError(f"invalid --alert-url {url!r} (expected http(s)://HOST[:PORT][/PATH])")
    token_file = None if raw["alert_token_file"] is None else str(raw["alert_token_file"])
    if token_file is not None and scheme != "https":
        raise SettingsError(
            f"--alert-token-file with --alert-url {url!r}: the token would cross the network in"
            " clear text; use https"
        )
    if raw["alert_filter"] is None:
        raise SettingsError(
            "--alert-url needs --alert-filter: which alerts hold drains (every alert would"
            " include those that always fire, such as Watchdog)"
        )
    try:
        alert_filter = AlertFilter.parse(str(raw["alert_filter"]))
    except ValueError as err:
        raise SettingsError(f"--alert-filter: {err}") from None
    interval = _named("--alert-interval", parse_duration, str(raw["alert_interval"]))
    if interval < MIN_ALERT_INTERVAL:
        least = format_duration(MIN_ALERT_INTERVAL)
        raise SettingsError(f"--alert-interval must be at least {least}")
    return AlertSettings(
        url=url,
        api=AlertApi(str(raw["alert_api"])),
        filter=alert_filter,
        interval=interval,
        on_unreachable=OnUnreachable(str(raw["alert_unreachable"])),
        token_file=token_file,
        ca_file=None if raw["alert_ca_file"] is None else str(raw["alert_ca_file"]),
    )


def _shield_settings(raw: dict[str, object]) -> ShieldSettings:
    selectors = _selectors(raw)
    for selector in selectors:
        if selector.namespace not in (None, MCO_NAMESPACE):
            raise SettingsError(
                f"--build-pod-selector {selector} names namespace {selector.namespace}: the"
                f" central shield keeps budgets in {MCO_NAMESPACE} only"
            )
        if selector.selector.positive().is_empty():
            # Its pod watch lists by the positive terms: none would list every pod of MCO's
            # namespace, a daemon pod per node (issue 28).
            raise SettingsError(
                f"--build-pod-selector {selector} has no label a pod must have (key=value,"
                " key in (...), or key): the central shield would watch every pod of"
                f" {MCO_NAMESPACE}; add one"
            )
    kubeconfig = raw["kubeconfig"]
    deployment = raw["deployment"]
    return ShieldSettings(
        kubeconfig=None if kubeconfig is None else str(kubeconfig),
        listen=_named("--listen", parse_listen, str(raw["listen"])),
        api_stale_after=_api_stale_after(raw),
        build_pod_selectors=selectors,
        deployment=None if deployment is None else parse_workload("--deployment", str(deployment)),
        log_format=LogFormat(str(raw["log_format"])),
        log_level=str(raw["log_level"]),
    )


def _api_stale_after(raw: Mapping[str, object]) -> timedelta:
    api_stale_after = _named("--api-stale-after", parse_duration, str(raw["api_stale_after"]))
    if api_stale_after <= timedelta(0):
        raise SettingsError("--api-stale-after must be greater than 0")
    return api_stale_after


def _selectors(raw: Mapping[str, object]) -> tuple[BuildPodSelector, ...]:
    selectors_raw = raw["build_pod_selector"]
    if selectors_raw is None:
        return default_build_pod_selectors()
    assert isinstance(selectors_raw, list)
    selectors = tuple(_parse_selector(str(s)) for s in selectors_raw)
    if not selectors:
        raise SettingsError("--build-pod-selector given but empty")
    return selectors


def _split_command(text: str) -> tuple[str, ...]:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise SettingsError(f"invalid --rpm-ostree-command {text!r}: {exc}") from None
    if not words:
        raise SettingsError("--rpm-ostree-command is empty")
    return tuple(words)


# --- drain-guard webhook (drain_guard.webhook) ---------------------------------------------

WEBHOOK_LISTEN = "0.0.0.0:9443"
#: Go's (IANA) names of OpenShift's TLS-profile suites, as kube-rbac-proxy takes them, in
#: OpenSSL's names. TLS 1.3 suites are not configurable in Python's ssl: OpenSSL's TLS 1.3
#: defaults are the profiles' three.
TLS13_SUITES = frozenset(
    ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
)
TLS12_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}


def add_webhook_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``webhook`` flags: its listener, its serving certificate and the cluster's TLS
    profile in kube-rbac-proxy's flags, and the kubeconfig of its pod lookups."""
    parser.add_argument("--listen", default=WEBHOOK_LISTEN, help="HOST:PORT to serve HTTPS on")
    parser.add_argument("--tls-cert-file", required=True, help="serving certificate (PEM)")
    parser.add_argument("--tls-private-key-file", required=True, help="its private key (PEM)")
    parser.add_argument(
        "--tls-min-version", default="VersionTLS12", choices=("VersionTLS12", "VersionTLS13")
    )
    parser.add_argument(
        "--tls-cipher-suites",
        default=",".join(TLS12_SUITES),
        help="comma-separated, Go's names, as kube-rbac-proxy's flag",
    )
    parser.add_argument(
        "--kubeconfig", help="for the pod lookups (default: KUBECONFIG, else in-cluster)"
    )
    parser.add_argument("--log-format", default="text", choices=[f.value for f in LogFormat])
