"""The client's credentials: kubeconfig, in-cluster token, the node proxy's socket; read
again when the API server refuses them (401)."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import aiohttp

from drain_guard import __version__
from drain_guard.kube import kubeclient as k8s
from drain_guard.kube import scratch
from drain_guard.kube.call import describe
from drain_guard.kube.counters import Counters, NullCounters
from drain_guard.kube.kubeclient import ConfigException

log = logging.getLogger(__name__)

DEFAULT_KUBECONFIG = os.path.expanduser("~/.kube/config")


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
    proxy's, drain_guard.programs.nodeproxy), with no credential of its own: the proxy adds the
    node's."""
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


def _ignore_environment(rest_client: Any) -> None:
    """Give the library's REST client a session that does not read the environment.

    The library builds its session with ``trust_env=True``: aiohttp then reads ``~/.netrc`` in
    a thread and looks the proxy variables up in another, on every request (two thread hops,
    about a quarter of a hold, docs/benchmarks.md). The agent takes its proxy, if it needs
    one, from its kubeconfig (``proxy-url``, which the library passes on each request), never
    from ``HTTPS_PROXY``: what the agent talks to is what its credentials say. The new session
    takes over the library's connector (its pool and TLS context) as it is.
    """
    built = rest_client.pool_manager
    rest_client.pool_manager = aiohttp.ClientSession(
        connector=built.connector, trust_env=False, read_bufsize=2**21
    )
    built.detach()


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
        _ignore_environment(self.rest_client)
        self.user_agent = f"drain-guard/{__version__}"
        self.kubeconfig = kubeconfig
        self.source = source
        self.identity = identity
        self.counters = counters
        self._tls = _tls_material(cfg)
        self._generation = 0  # one more each time other credentials are taken up
        #: Set each time other credentials are taken up (the confinement self-check runs again).
        self.renewed = asyncio.Event()
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
            _ignore_environment(self.rest_client)
            self._tls = tls
        self._generation += 1
        self.renewed.set()

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
        # Its inline certificate data goes to files in a directory of this process's own,
        # which the next start removes should this process be killed (kube/scratch.py).
        await k8s.load_kube_config(
            config_file=path, client_configuration=cfg, temp_file_path=scratch.own_directory()
        )
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
