"""Kubernetes I/O over kubernetes_asyncio: client set-up, list-then-watch, compare-and-swap.

The watch stream is read here rather than through ``kubernetes_asyncio.watch.Watch``: that
class retries a 410 once with the same stale resourceVersion and then raises, turns error
statuses into exceptions without their headers (so a 429's Retry-After is lost), and reads
lines with aiohttp's 64 KiB line limit. Reading the stream ourselves keeps one explicit state
machine: list, watch from the list's resourceVersion (bookmarks move it forward), renew on the
server's ``timeoutSeconds``, re-list on 410, back off with jitter on anything else.

Every request carries a timeout; nothing here polls.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import json
import logging
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import aiohttp

from drain_guard import __version__
from drain_guard import kubeclient as k8s
from drain_guard.kubeclient import ConfigException
from drain_guard.pods import Pod
from drain_guard.protocol import format_rfc3339
from drain_guard.status import WatchStatus, format_duration

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0  # seconds, for every non-watch request but the Node writes
#: A Node write hung this long is given up and retried on a fresh connection (the loop's
#: backoff: 0.25-0.5 s), all within 3 s: the drain controller acts 2-5 s after a request. The
#: retry is safe: the write's ``test`` operations refuse it if the first one landed meanwhile.
NODE_WRITE_TIMEOUT = 2.0
#: ``timeoutSeconds`` asked for on watches (±10 %): client-go's reflector asks 5 to 10 minutes.
#: Each renewal is one request; at rest they are nearly all the agent sends.
WATCH_TIMEOUT = 600
#: Items per page of a list (``limit``/``continue``), as client-go's reflector pages: the API
#: server answers a large list in bounded pieces, and none is one response of the whole set.
LIST_PAGE = 500
#: How often kube-apiserver sends a bookmark on an idle watch (its watch cache's bookmark
#: frequency: a minute). A stream silent for 1.5 periods is reported silent (``/readyz``
#: fails, ``/status`` says so); at 2 periods it is taken for a half-open connection and renewed.
BOOKMARK_PERIOD = 60.0
JSON_PATCH = "application/json-patch+json"
DEFAULT_KUBECONFIG = os.path.expanduser("~/.kube/config")
JsonObj = dict[str, Any]


class KubeError(Exception):
    """A failed API call: HTTP status (0 for transport errors), reason and Retry-After."""

    def __init__(self, status: int, reason: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}" if status else f"no answer: {reason}")
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class Counters(Protocol):
    """Where the I/O layer reports errors and watch restarts (the controller maps to metrics)."""

    def api_error(self, operation: str, status: int) -> None: ...

    def api_contact(self) -> None: ...

    def watch_restart(self, resource: str, reason: str) -> None: ...

    def watch_state(self, resource: str, state: WatchStatus) -> None: ...

    def credentials_read(self, identity: str) -> None: ...

    def credentials_refused(self, identity: str, refused: bool) -> None: ...


class NullCounters:
    """Counters for callers without metrics (the CLI)."""

    def api_error(self, operation: str, status: int) -> None:
        return None

    def api_contact(self) -> None:
        return None

    def watch_restart(self, resource: str, reason: str) -> None:
        return None

    def watch_state(self, resource: str, state: WatchStatus) -> None:
        return None

    def credentials_read(self, identity: str) -> None:
        return None

    def credentials_refused(self, identity: str, refused: bool) -> None:
        return None


@dataclass(frozen=True)
class NodeObj:
    """The parts of a Node the agent reads."""

    name: str
    resource_version: str
    annotations: Mapping[str, str]
    unschedulable: bool
    uid: str = ""

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> NodeObj:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        return cls(
            name=str(meta.get("name", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
            unschedulable=bool(spec.get("unschedulable", False)),
            uid=str(meta.get("uid", "")),
        )


@dataclass
class WatchCache:
    """The latest Node and pods from the watches; ``changed`` wakes the controller."""

    node: NodeObj | None = None
    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)
    node_synced: bool = False
    pods_synced: bool = False
    # monotonic time at which the watch delivered the latest Node version, for reaction_seconds
    node_seen_at: float = 0.0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Called after every change of the pods (the shield plans on the same pods).
    pod_listeners: list[Callable[[], None]] = field(default_factory=list)

    @property
    def synced(self) -> bool:
        return self.node_synced and self.pods_synced

    def _notify(self) -> None:
        self.changed.set()

    def replace_node(self, items: Sequence[JsonObj]) -> None:
        self.node = NodeObj.from_dict(items[0]) if items else None
        self.node_synced = True
        self.node_seen_at = time.monotonic()
        self._notify()

    def apply_node(self, kind: str, obj: JsonObj) -> None:
        self.node = None if kind == "DELETED" else NodeObj.from_dict(obj)
        self.node_seen_at = time.monotonic()
        self._notify()

    def _notify_pods(self) -> None:
        self._notify()
        for listener in self.pod_listeners:
            listener()

    def replace_pods(self, items: Sequence[JsonObj]) -> None:
        self.pods = {}
        for item in items:
            pod = Pod.from_dict(item)
            self.pods[(pod.namespace, pod.name)] = pod
        self.pods_synced = True
        self._notify_pods()

    def apply_pod(self, kind: str, obj: JsonObj) -> None:
        pod = Pod.from_dict(obj)
        key = (pod.namespace, pod.name)
        if kind == "DELETED":
            self.pods.pop(key, None)
        else:
            self.pods[key] = pod
        self._notify_pods()


@dataclass(frozen=True)
class Applied:
    """A patch that was committed; ``node`` is the Node as the server returned it."""

    node: NodeObj


@dataclass(frozen=True)
class Conflict:
    """A compare-and-swap that lost (422 failed ``test``, or 409): re-read and decide again."""

    status: int
    message: str


PatchResult = Applied | Conflict


class WorkloadState(enum.Enum):
    ABSENT = "absent"
    DELETING = "deleting"
    PRESENT = "present"


@dataclass
class Backoff:
    """Exponential backoff with full jitter; reset after any success."""

    base: float = 0.5
    cap: float = 30.0
    attempt: int = 0

    def next_delay(self, retry_after: float | None = None) -> float:
        self.attempt += 1
        if retry_after is not None:
            return min(max(retry_after, 0.0), 120.0)
        # Equal jitter: spread out, yet never an immediate retry ("retrying in 0.0s").
        step = min(self.cap, self.base * 2 ** (self.attempt - 1))
        return float(step / 2 + random.uniform(0, step / 2))

    def reset(self) -> None:
        self.attempt = 0


#: What a failed API call raises: the API's answer (or its absence), not a bug of ours.
API_FAILURES = (KubeError, aiohttp.ClientError, TimeoutError)


#: While a run of failures lasts, a WARNING says so again this often (seconds).
OUTAGE_REMINDER = 300.0
_ERROR_TYPE = re.compile(r"\b(\w*(?:Error|Exception|Timeout)\w*):")


def failure_kind(exc: BaseException) -> str:
    """What kind of failure ``exc`` is: its HTTP status, else the transport error's type (a
    refused connection and a refused certificate are different problems for the operator)."""
    status = getattr(exc, "status", 0)
    if status:
        return f"HTTP {status}"
    if isinstance(exc, KubeError):
        found = _ERROR_TYPE.search(exc.reason)
        return found.group(1) if found else exc.reason
    return type(exc).__name__


class Outage:
    """A run of failures of one part of the agent (a watch, the controller's pass, the
    shield's pass), logged when it begins, when the kind of failure changes (the API came back
    with another CA: unreachable becomes a certificate error), every ``OUTAGE_REMINDER``
    seconds while it lasts, and when it ends; other retries are DEBUG lines, and each is a count
    in the metrics (``count``).

    A failure that is not the API's (an ``OSError`` out of descriptors, a bug) is retried the
    same way: one failed step never ends the agent. Its first line carries the traceback.
    """

    def __init__(
        self,
        what: str,
        logger: logging.Logger,
        count: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.logger = logger
        self.count = count
        self.clock = clock
        #: When the run began (wall clock, monotonic), None while the calls work.
        self._since: tuple[datetime, float] | None = None
        #: The kind of the latest failure (failure_kind) and when a WARNING last said so.
        self._kind = ""
        self._said_at = 0.0
        #: How the log names the current run: ("API unreachable", "API reachable again").
        self._words = ("", "")
        self._retries = 0
        #: The latest failure, while failing.
        self.error: str | None = None

    @property
    def since(self) -> datetime | None:
        """When the current run of failures began; None while the calls work."""
        return None if self._since is None else self._since[0]

    def failed(self, action: str, exc: BaseException, delay: float) -> None:
        """``action`` failed with ``exc``; the caller retries in ``delay`` seconds."""
        why = str(exc) if isinstance(exc, KubeError | _StreamError) else describe(exc)
        status = getattr(exc, "status", 0)
        ours = not isinstance(exc, (*API_FAILURES, _StreamError, ValueError))
        self.error = why
        if self.count is not None:
            self.count()
        kind, at = failure_kind(exc), self.clock()
        if ours:
            words = ("failing", "working again")
        elif status == 0 or status >= 500:
            words = ("API unreachable", "API reachable again")
        else:
            words = ("API refusing it", "API accepting it again")
        if self._since is not None:
            self._retries += 1
            since, start = self._since
            changed, self._kind = kind != self._kind, kind
            if changed:
                self._words = words
            if not changed and at - self._said_at < OUTAGE_REMINDER:
                self.logger.debug(
                    "%s: %s failed again (%s); retry in %.1fs", self.what, action, why, delay
                )
                return
            self._said_at = at
            self.logger.warning(
                "%s: %s since %s (%s, %d retries); %s %s failed: %s",
                self.what,
                self._words[0],
                format_rfc3339(since),
                format_duration(timedelta(seconds=at - start)),
                self._retries,
                "now" if changed else "still:",
                action,
                why,
            )
            return
        now = datetime.now(UTC)
        self._since, self._retries = (now, at), 1
        self._kind, self._said_at, self._words = kind, at, words
        self.logger.warning(
            "%s: %s since %s (%s failed: %s); retrying in %.1fs, then with backoff",
            self.what,
            self._words[0],
            format_rfc3339(now),
            action,
            why,
            delay,
            exc_info=exc if ours else None,
        )

    def ended(self) -> None:
        """The API answered: log the end of a run of failures, once."""
        if self._since is None:
            return
        since, start = self._since
        self._since, self.error = None, None
        self.logger.warning(
            "%s: %s after %s (failing since %s, %d retries)",
            self.what,
            self._words[1],
            format_duration(timedelta(seconds=self.clock() - start)),
            format_rfc3339(since),
            self._retries,
        )


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


async def _error_from(resp: aiohttp.ClientResponse) -> KubeError:
    text = await resp.text()
    reason = resp.reason or ""
    try:
        body = json.loads(text)
        reason = str(body.get("message") or body.get("reason") or reason)
    except ValueError:
        pass
    return KubeError(resp.status, reason, _retry_after(resp.headers))


async def call_api(fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> JsonObj:
    """:func:`call_api_within` the default ``REQUEST_TIMEOUT``."""
    return await call_api_within(REQUEST_TIMEOUT, fn, *args, **kwargs)


async def call_api_within(
    request_timeout: float, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
) -> JsonObj:
    """Call a generated kubernetes_asyncio API function with a timeout, unparsed, and return
    its JSON body. Every non-watch call of the agent goes through here, so that every caller
    sees the same :class:`KubeError`: a non-2xx status with the server's message and
    ``Retry-After``, or status 0 for a transport error or a body that is not a JSON object."""
    try:
        resp = await fn(*args, _preload_content=False, _request_timeout=request_timeout, **kwargs)
        async with resp:
            if not 200 <= resp.status <= 299:
                raise await _error_from(resp)
            text = await resp.text()
        body = json.loads(text) if text else {}
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise KubeError(0, f"{_name(fn)}: {describe(exc, request_timeout)}") from exc
    if not isinstance(body, dict):
        raise KubeError(0, f"malformed response: {type(body).__name__}, not an object")
    return body


async def load_configuration(kubeconfig: str | None) -> tuple[k8s.Configuration, str]:
    """The client configuration from ``kubeconfig``, else the in-cluster config, else
    ~/.kube/config; and where its credentials came from, for the log."""
    cfg = k8s.Configuration()
    if kubeconfig is not None:
        # kubectl's list form (KUBECONFIG=a:b) is merged by the library, first file first.
        paths = [p for p in kubeconfig.split(os.pathsep) if p]
        # The library reports a missing file as a missing current-context: say it plainly.
        if not any(os.path.isfile(p) for p in paths):  # noqa: ASYNC240  (one stat per load)
            raise ConfigException(f"kubeconfig {kubeconfig} not found")
        await _load_kubeconfig(kubeconfig, cfg)
        return cfg, f"kubeconfig {kubeconfig}"
    try:
        k8s.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except ConfigException as in_cluster:
        if not os.path.isfile(DEFAULT_KUBECONFIG):  # noqa: ASYNC240
            raise ConfigException(
                f"not in a cluster ({in_cluster}) and no {DEFAULT_KUBECONFIG};"
                " give --kubeconfig or KUBECONFIG"
            ) from None
        await _load_kubeconfig(DEFAULT_KUBECONFIG, cfg)
        return cfg, f"kubeconfig {DEFAULT_KUBECONFIG}"
    return cfg, "the pod's service-account token"


async def load_api_client(
    kubeconfig: str | None, counters: Counters | None = None, identity: str = "agent"
) -> ApiClient:
    """An :class:`ApiClient` as :func:`load_configuration` configures it."""
    cfg, source = await load_configuration(kubeconfig)
    return ApiClient(cfg, kubeconfig, source, identity, counters or NullCounters())


async def load_socket_client(path: str, counters: Counters | None = None) -> ApiClient:
    """An :class:`ApiClient` that sends every request over the Unix socket ``path`` (the node
    proxy's, drain_guard.nodeproxy), with no credential of its own: the proxy adds the node's."""
    api = ApiClient(
        k8s.Configuration(host="http://drain-guard-node-proxy"),
        None,
        f"the node proxy at {path}",
        "agent",
        counters or NullCounters(),
    )
    await api.use_socket(path)
    return api


def _tls_material(cfg: k8s.Configuration) -> tuple[bytes | None, ...]:
    """The bytes of the client certificate, key and CA files ``cfg`` names: the kubelet
    rotates a certificate in place (same path, new content)."""

    def read(path: str | None) -> bytes | None:
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    return read(cfg.cert_file), read(cfg.key_file), read(cfg.ssl_ca_cert)


async def _auth_headers(cfg: k8s.Configuration) -> dict[str, str]:
    """The headers ``cfg``'s credentials put on a request (``authorization: Bearer …``)."""
    settings = await cfg.auth_settings()
    return {a["key"]: a["value"] for a in settings.values() if a["in"] == "header" and a["value"]}


class ApiClient(k8s.ApiClient):
    """The library's ApiClient, reading its credentials again when the API server answers 401.

    Every request of the agent goes through one of these (calls, lists, watches, the shield's,
    the Events'), so a rotated credential is picked up without a restart whichever request
    meets it first: the projected service-account token the kubelet renews, a kubeconfig's
    ``token``/``tokenFile`` rewritten, a client certificate rotated in place. If what it reads
    differs from what was refused, the request is sent again once with it; else, or if that
    is refused too, the 401 goes back to the caller (which retries with backoff) and the
    refusal is logged once and shown in ``drain_guard_credentials_refused`` until a request
    is accepted. The agent reads responses raw (``_preload_content=False``), as this expects.
    """

    def __init__(
        self,
        cfg: k8s.Configuration,
        kubeconfig: str | None,
        source: str,
        identity: str,
        counters: Counters,
    ) -> None:
        super().__init__(configuration=cfg)
        self.user_agent = f"drain-guard/{__version__}"
        self.kubeconfig = kubeconfig
        self.source = source
        self.identity = identity
        self.counters = counters
        self._tls = _tls_material(cfg)
        self._generation = 0  # one more each time other credentials are taken up
        self._reading = asyncio.Lock()
        self._refused = False
        # The connection pool before the last certificate change: closed at the next one, when
        # nothing sent on it can still be running (the agent's longest request is a watch).
        self._retired: Any = None
        # Over the node proxy's socket there is nothing to read again: the proxy does it.
        self._rereadable = True

    # The library calls it by keyword, and only with the parameters of its own signature.
    async def request(  # type: ignore[override]
        self, method: str, url: str, headers: dict[str, str] | None = None, **options: Any
    ) -> Any:
        sent = self._generation
        resp = await super().request(method, url, headers=headers, **options)
        if resp.status == 401 and await self._renewed(sent):
            resp.release()
            retry = {k: v for k, v in (headers or {}).items() if k.lower() != "authorization"}
            retry.update(await _auth_headers(self.configuration))
            resp = await super().request(method, url, headers=retry, **options)
        self._answered(resp.status == 401)
        return resp

    async def _renewed(self, sent: int) -> bool:
        """Whether credentials other than those a refused request was ``sent`` with are in use
        now: read them again, unless another request's 401 has already done so."""
        if not self._rereadable:
            return False
        async with self._reading:
            if self._generation == sent:
                self.counters.credentials_read(self.identity)
                try:
                    cfg, self.source = await load_configuration(self.kubeconfig)
                    tls = _tls_material(cfg)
                    auth = await _auth_headers(cfg)
                except (ConfigException, OSError, ValueError) as exc:
                    log.warning(
                        "%s credentials refused (401); reading them again failed: %s",
                        self.identity,
                        describe(exc),
                    )
                    return False
                if auth == await _auth_headers(self.configuration) and tls == self._tls:
                    return False
                self._adopt(cfg, tls)
                log.info(
                    "%s credentials refused (401); read them again from %s: renewed",
                    self.identity,
                    self.source,
                )
        return self._generation != sent

    async def use_socket(self, path: str) -> None:
        """Send every request over the Unix socket ``path`` instead of TCP."""
        plain, self.rest_client.pool_manager = (
            self.rest_client.pool_manager,
            aiohttp.ClientSession(connector=aiohttp.UnixConnector(path), read_bufsize=2**21),
        )
        await plain.close()
        self._rereadable = False

    def _adopt(self, cfg: k8s.Configuration, tls: tuple[bytes | None, ...]) -> None:
        self.configuration = cfg
        if tls != self._tls:  # a new pool: its TLS context holds the certificate
            if self._retired is not None:
                asyncio.get_running_loop().create_task(self._retired.close())
            self._retired, self.rest_client = self.rest_client, type(self.rest_client)(cfg)
            self._tls = tls
        self._generation += 1

    def _answered(self, refused: bool) -> None:
        """Log, and show, the change between refused and accepted credentials, once each."""
        if refused == self._refused:
            return
        self._refused = refused
        self.counters.credentials_refused(self.identity, refused)
        if refused:
            log.error(
                "the API server refuses the %s credentials (401 Unauthorized), also as read"
                " again from %s: renew them there; requests are retried with backoff, and"
                " the credentials read again on each refusal",
                self.identity,
                self.source,
            )
        else:
            log.warning("the API server accepts the %s credentials again", self.identity)

    async def close(self) -> None:
        await super().close()
        if self._retired is not None:
            await self._retired.close()


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as file:
        return file.read()


async def _load_kubeconfig(path: str, cfg: k8s.Configuration) -> None:
    """Load ``path`` into ``cfg``; a malformed file is one ConfigException line.

    The library lets whatever its YAML parser or its walk over the file raises escape
    (ScannerError, TypeError, AttributeError, ...), many lines long.
    """
    try:
        files = [p for p in path.split(os.pathsep) if p and os.path.isfile(p)]  # noqa: ASYNC240
        if not any(_read_text(p).strip() for p in files):
            raise ConfigException(f"kubeconfig {path} is empty")
        await k8s.load_kube_config(config_file=path, client_configuration=cfg)
    except ConfigException as exc:
        if str(exc).startswith(f"kubeconfig {path} "):
            raise
        raise ConfigException(f"kubeconfig {path}: {' '.join(str(exc).split())}") from None
    except OSError as exc:
        if exc.filename == path:
            raise ConfigException(f"cannot read kubeconfig {path}: {describe(exc)}") from None
        # The library writes inline certificate data (certificate-authority-data, ...) to
        # temporary files: with no writable temporary directory, say that, not "malformed".
        raise ConfigException(
            f"kubeconfig {path}: cannot write its inline certificate data to a temporary file"
            f" ({describe(exc)}); give the agent a writable temporary directory (TMPDIR, such"
            " as an emptyDir at /tmp)"
        ) from None
    except Exception as exc:  # any parse failure of a malformed file
        raise ConfigException(f"kubeconfig {path} is malformed: {describe(exc)}") from None


def describe(exc: BaseException, timeout: float | None = None) -> str:
    """``Type: message`` on one line; never empty, as a bare TimeoutError's message is."""
    text = " ".join(str(exc).split())
    if not text and isinstance(exc, TimeoutError):
        text = "timed out" if timeout is None else f"no answer within {timeout:g}s"
    return f"{type(exc).__name__}: {text or 'no detail'}"


def _name(fn: Callable[..., Any]) -> str:
    """The generated API function's name (``read_node``), through functools.partial."""
    return str(
        getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "API call")
    )


class Kube:
    """The few API calls the agent and the CLI make, each with a timeout and raw JSON out."""

    def __init__(self, api: k8s.ApiClient, counters: Counters | None = None) -> None:
        self.api = api
        self.core = k8s.CoreV1Api(api)
        self.apps = k8s.AppsV1Api(api)
        self.counters: Counters = counters or NullCounters()

    @classmethod
    async def connect(
        cls, kubeconfig: str | None, counters: Counters | None = None, socket: str | None = None
    ) -> Kube:
        """With ``socket``, every request goes through the node proxy there."""
        if socket is not None:
            return cls(await load_socket_client(socket, counters), counters)
        return cls(await load_api_client(kubeconfig, counters), counters)

    async def close(self) -> None:
        await self.api.close()

    async def call(
        self,
        operation: str,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        answers: tuple[int, ...] = (404,),
        request_timeout: float | None = None,
        **kwargs: Any,
    ) -> JsonObj:
        """:func:`call_api`, counted: the one way the agent and the central shield make a
        (non-watch) call. A success, or a status in ``answers`` (404 by default: absent), is
        API contact (``/readyz``, ``drain_guard_last_api_contact_timestamp_seconds``); any
        other failure counts in ``drain_guard_api_errors_total{operation}``."""
        timeout = REQUEST_TIMEOUT if request_timeout is None else request_timeout
        try:
            body = await call_api_within(timeout, fn, *args, **kwargs)
        except KubeError as exc:
            if exc.status in answers:
                self.counters.api_contact()
            else:
                self.counters.api_error(operation, exc.status)
            raise
        self.counters.api_contact()
        return body

    async def get_node(self, name: str) -> NodeObj | None:
        try:
            return NodeObj.from_dict(await self.call("node_get", self.core.read_node, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def list_nodes(self) -> list[NodeObj]:
        body = await self.call("node_list", self.core.list_node)
        return [NodeObj.from_dict(item) for item in body.get("items") or ()]

    async def patch_node_json(self, name: str, ops: Sequence[Mapping[str, Any]]) -> PatchResult:
        """Apply a JSON Patch; a failed ``test`` (422) or a 409 is a :class:`Conflict`."""
        try:
            body = await self.call(
                "node_patch",
                self.core.patch_node,
                name,
                [dict(op) for op in ops],
                _content_type=JSON_PATCH,
                request_timeout=NODE_WRITE_TIMEOUT,
            )
        except KubeError as exc:
            if exc.status in (409, 422):
                return Conflict(exc.status, exc.reason)
            raise
        return Applied(NodeObj.from_dict(body))

    async def dry_run_patch_node(self, name: str, patch: Mapping[str, Any]) -> None:
        """A merge patch of Node ``name`` with ``dryRun=All``: authorization and admission
        run, nothing is stored. A denial (403) is not counted as an API error: the
        confinement self-check expects it."""
        await self.call(
            "node_patch",
            self.core.patch_node,
            name,
            dict(patch),
            dry_run="All",
            _content_type="application/merge-patch+json",
            answers=(403, 404),
        )

    async def dry_run_token_request(self, namespace: str, account: str) -> None:
        """A TokenRequest for service account ``account`` with ``dryRun=All``. A denial (403)
        or an absent account (404) is an answer, not an API error: the confinement self-check
        asks it expecting a refusal."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [], "expirationSeconds": 600},
        }
        await self.call(
            "token_create",
            self.core.create_namespaced_service_account_token,
            account,
            namespace,
            body,
            dry_run="All",
            answers=(403, 404),
        )

    async def other_node(self, name: str) -> str | None:
        """The name of some Node other than ``name`` (None on a single-node cluster)."""
        body = await self.call(
            "node_list", self.core.list_node, field_selector=f"metadata.name!={name}", limit=1
        )
        items = body.get("items") or ()
        return str(items[0]["metadata"]["name"]) if items else None

    async def get_daemonset(self, namespace: str, name: str) -> JsonObj | None:
        try:
            return await self.call(
                "daemonset_get", self.apps.read_namespaced_daemon_set, name, namespace
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def get_pod(self, namespace: str, name: str) -> JsonObj | None:
        try:
            return await self.call("pod_get", self.core.read_namespaced_pod, name, namespace)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def get_deployment(self, namespace: str, name: str) -> JsonObj | None:
        try:
            return await self.call(
                "deployment_get", self.apps.read_namespaced_deployment, name, namespace
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def daemonset_state(self, namespace: str, name: str) -> WorkloadState:
        return _workload_state(await self.get_daemonset(namespace, name))

    async def deployment_state(self, namespace: str, name: str) -> WorkloadState:
        return _workload_state(await self.get_deployment(namespace, name))

    async def watch_node(
        self, name: str, cache: WatchCache, watch_timeout: int = WATCH_TIMEOUT
    ) -> None:
        """Keep ``cache.node`` current until cancelled."""
        await ListWatch(
            resource="node",
            list_fn=self.core.list_node,
            field_selector=f"metadata.name={name}",
            replace=cache.replace_node,
            apply=cache.apply_node,
            counters=self.counters,
            name=f"node {name}",
            watch_timeout=watch_timeout,
        ).run()

    async def watch_pods(
        self,
        node_name: str,
        cache: WatchCache,
        namespace: str | None,
        watch_timeout: int = WATCH_TIMEOUT,
    ) -> None:
        """Keep ``cache.pods`` (the pods bound to ``node_name``, in ``namespace``, or in every
        namespace when None) current until cancelled: the agent's one pod watch."""
        where = f" in {namespace}" if namespace else ""
        await ListWatch(
            resource="pod",
            list_fn=self.core.list_pod_for_all_namespaces
            if namespace is None
            else functools.partial(self.core.list_namespaced_pod, namespace),
            field_selector=f"spec.nodeName={node_name}",
            replace=cache.replace_pods,
            apply=cache.apply_pod,
            counters=self.counters,
            name=f"pods on node {node_name}{where}",
            watch_timeout=watch_timeout,
        ).run()


def _workload_state(body: JsonObj | None) -> WorkloadState:
    if body is None:
        return WorkloadState.ABSENT
    if (body.get("metadata") or {}).get("deletionTimestamp"):
        return WorkloadState.DELETING
    return WorkloadState.PRESENT


class _GoneError(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class _StreamError(Exception):
    """An ERROR event other than 410 in the watch stream."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status} {message}")
        self.status = status


@dataclass
class ListWatch:
    """List, then watch from the list's resourceVersion, forever (until cancelled)."""

    resource: str
    list_fn: Callable[..., Awaitable[Any]]
    field_selector: str
    replace: Callable[[Sequence[JsonObj]], None]
    apply: Callable[[str, JsonObj], None]
    counters: Counters
    #: What the logs call this watch ("pods on node worker-0"); the metrics use ``resource``.
    name: str = ""
    watch_timeout: int = WATCH_TIMEOUT
    #: Only the objects with these labels (the central shield's watches of build pods).
    label_selector: str = ""
    resource_version: str | None = None
    backoff: Backoff = field(default_factory=Backoff)
    _phase: str = "list"
    _listed: bool = False
    #: Since when (wall clock) the open stream has been silent past 1.5 bookmark periods.
    _silent_since: datetime | None = None
    outage: Outage = field(init=False)

    def __post_init__(self) -> None:
        # Each retry counts as a restart of the watch, with reason "error".
        self.outage = Outage(
            f"watch of {self.name or self.resource}",
            log,
            lambda: self.counters.watch_restart(self.resource, "error"),
        )

    async def run(self) -> None:
        while True:
            try:
                if self.resource_version is None:
                    self._phase = "list"
                    await self._list()
                self._phase = "watch"
                await self._watch_once()
                # The server ended the watch (timeoutSeconds): renew from where we are.
                self.counters.watch_restart(self.resource, "closed")
            except _GoneError:
                log.info("watch of %s expired (410), listing again", self.name or self.resource)
                self.counters.watch_restart(self.resource, "expired")
                self.resource_version = None
            except Exception as exc:  # a failed renewal never ends the watch
                status = getattr(exc, "status", 0)
                if isinstance(exc, (*API_FAILURES, _StreamError, ValueError)):
                    self.counters.api_error(f"{self.resource}_{self._phase}", status)
                if not isinstance(exc, (*API_FAILURES, ValueError)):
                    self.resource_version = None  # a stream error, or ours: list afresh
                retry_after = exc.retry_after if isinstance(exc, KubeError) else None
                delay = self.backoff.next_delay(retry_after if status == 429 else None)
                self.outage.failed(self._phase, exc, delay)
                self._report_state()
                await asyncio.sleep(delay)

    def _answered(self) -> None:
        """A list, or the start of a watch, was answered: the watch is current."""
        failing = self.outage.since is not None
        self.outage.ended()
        if failing or not self._listed:
            self._listed = True
            self._report_state()

    def _report_state(self) -> None:
        silent = self._silent_since is not None and self.outage.since is None
        self.counters.watch_state(
            self.resource,
            WatchStatus(
                listed=self._listed,
                watching=self._listed and self.outage.since is None and not silent,
                failing_since=self.outage.since or self._silent_since,
                error=self.outage.error or (self._silence(1.5) if silent else None),
                silent=silent,
            ),
        )

    @staticmethod
    def _silence(periods: float) -> str:
        return f"no event or bookmark for {periods * BOOKMARK_PERIOD:g}s"

    async def _read(self, resp: aiohttp.ClientResponse) -> bytes:
        """The stream's next bytes (b"" at its end). Silent for 1.5 bookmark periods, the
        watch is reported silent; for 2, TimeoutError: the stream is renewed."""
        try:
            async with asyncio.timeout(1.5 * BOOKMARK_PERIOD):
                return await resp.content.readany()
        except TimeoutError:
            pass
        self._silent_since = datetime.now(UTC) - timedelta(seconds=1.5 * BOOKMARK_PERIOD)
        self._report_state()
        try:
            async with asyncio.timeout(0.5 * BOOKMARK_PERIOD):
                chunk = await resp.content.readany()
        except TimeoutError:
            raise TimeoutError(f"{self._silence(2)}: a frozen stream, renewed") from None
        finally:
            self._silent_since = None
        self._report_state()
        return chunk

    def _selectors(self) -> dict[str, str]:
        selectors = {"field_selector": self.field_selector}
        if self.label_selector:
            selectors["label_selector"] = self.label_selector
        return selectors

    async def _list(self) -> None:
        """List in pages of LIST_PAGE (one consistent snapshot: every page is read at the
        first one's resourceVersion); an expired ``continue`` (410) is a failed list, retried
        from the first page."""
        items: list[JsonObj] = []
        page: dict[str, str] = {}
        while True:
            body = await call_api(self.list_fn, **self._selectors(), limit=LIST_PAGE, **page)
            self.counters.api_contact()
            page_items = body.get("items") or []
            if not isinstance(page_items, list):
                raise ValueError(f"malformed {self.resource} list: items is not a list")
            items += page_items
            metadata = body.get("metadata") or {}
            if not metadata.get("continue"):
                break
            page = {"_continue": str(metadata["continue"])}
        try:
            self.replace(items)
        except (AttributeError, TypeError) as exc:
            raise ValueError(f"malformed {self.resource} in list: {exc}") from None
        self.resource_version = str(metadata.get("resourceVersion", ""))
        self._answered()
        self.backoff.reset()

    async def _watch_once(self) -> None:
        # Jitter the server-side timeout so that a fleet of agents does not renew in lockstep.
        server_timeout = max(1, int(self.watch_timeout * random.uniform(0.9, 1.1)))
        resp = await self.list_fn(
            **self._selectors(),
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=server_timeout,
            _preload_content=False,
            # A silent stream is renewed by _read, after two bookmark periods.
            _request_timeout=aiohttp.ClientTimeout(
                total=server_timeout + 30, sock_connect=REQUEST_TIMEOUT
            ),
        )
        async with resp:
            if resp.status == 410:
                raise _GoneError()
            if not 200 <= resp.status <= 299:
                raise await _error_from(resp)
            self.counters.api_contact()
            self._answered()
            # Split events ourselves: aiohttp's readline() refuses lines over 64 KiB, and
            # one Pod with large annotations can be longer than that.
            buffer = b""
            while chunk := await self._read(resp):
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        self._handle_line(line)
            if buffer.strip():
                self._handle_line(buffer)

    def _handle_line(self, line: bytes) -> None:
        event = json.loads(line)
        obj = event.get("object") or {} if isinstance(event, dict) else None
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata") or {}, dict):
            # A garbled stream: fail this watch (counted, logged, retried) rather than the
            # task, which would take the agent down with it. Re-list from scratch.
            self.resource_version = None
            raise ValueError(f"malformed watch event on {self.resource}: not an object")
        kind = str(event.get("type", ""))
        if kind == "ERROR" or "type" not in event:
            status = obj if kind == "ERROR" else event
            code = int(status.get("code") or 0)
            if code == 410:
                raise _GoneError()
            raise _StreamError(code, str(status.get("message", "")))
        # Events and bookmarks (about one a minute from a real server) show the API alive.
        self.counters.api_contact()
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        log.debug("watch of %s: %s at resourceVersion %s", self.name or self.resource, kind, rv)
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = str(rv)
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("ignoring watch event of type %r on %s", kind, self.resource)
            return
        try:
            self.apply(kind, obj)
        except (AttributeError, TypeError) as exc:
            self.resource_version = None
            raise ValueError(f"malformed {self.resource} in watch event: {exc}") from None
        if rv:
            self.resource_version = str(rv)
        self.backoff.reset()
