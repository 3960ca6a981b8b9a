"""``drain-guard webhook``: the validating admission webhook of OpenShift 4.15/4.16.

The decisions are drain_guard.confine.admission's (pure); this is the HTTP part: an aiohttp server
over TLS (certificate and key from files, the service CA's serving certificate in the
Deployment, re-read when they change; the cluster's TLS profile as kube-rbac-proxy takes it,
``--tls-min-version`` and ``--tls-cipher-suites`` in Go's names) that answers
AdmissionReview v1 on ``POST /validate``, looking up the pods a decision needs with its own
read-only identity. ``/healthz`` and ``/readyz`` for the kubelet.

When a lookup fails (the API server unreachable from here, a 403) the webhook does not
guess: it answers 503, and the API server applies the webhook entry's failurePolicy (Fail:
the request is refused; Ignore: the one entry that matches only the release of a hold lets it
through, docs/install.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from drain_guard.config.values import LogFormat, SettingsError
from drain_guard.confine import admission
from drain_guard.core.exitcodes import EXIT_USAGE
from drain_guard.core.operations import Operation
from drain_guard.kube.call import KubeError
from drain_guard.kube.client import Kube
from drain_guard.runtime.connections import CappedSite
from drain_guard.runtime.lifecycle import Program, Running, run_program
from drain_guard.runtime.logs import configure_logging
from drain_guard.settings.webhook import WebhookSettings

log = logging.getLogger("drain_guard.programs.webhook")

#: How often the certificate files are checked for a renewal (the service CA re-issues them
#: into the secret, and the kubelet updates the mounted files, well before they expire).
CERT_CHECK_INTERVAL = 60.0
#: An AdmissionReview of a Node carries it twice (object, oldObject): an OpenShift worker's is
#: tens of KiB (its status's 50 images the most of it). Anything larger is refused (413)
#: before it is parsed: the write is then decided by the entry's failurePolicy.
MAX_BODY = 512 * 1024
#: The API server sends a review whole at once; a body that trickles is cut off (408).
BODY_TIMEOUT = 2.0
#: Open connections: beyond them the excess waits in the kernel's queue (drain_guard.runtime.server.
#: CappedSite), so that a flood holds at most this many bodies in memory.
MAX_CONNECTIONS = 64
#: Reviews parsed and decided at once; the others wait their turn. A parse holds the
#: interpreter (the JSON scanner does not let go of the GIL), so one at a time, in a thread.
MAX_REVIEWS = 1
TLS_VERSIONS = {"VersionTLS12": ssl.TLSVersion.TLSv1_2, "VersionTLS13": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class Tls:
    cert_file: str
    key_file: str
    min_version: ssl.TLSVersion
    ciphers: str  # OpenSSL's names, the TLS 1.2 suites

    @classmethod
    def of(cls, settings: WebhookSettings) -> Tls:
        version = TLS_VERSIONS[settings.tls_min_version]
        ciphers = ":".join(settings.tls12_ciphers)
        return cls(settings.tls_cert_file, settings.tls_private_key_file, version, ciphers)

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = self.min_version
        if self.ciphers:
            ctx.set_ciphers(self.ciphers)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def stamp(self) -> tuple[float, ...]:
        return tuple(os.stat(p).st_mtime for p in (self.cert_file, self.key_file))


class PodLookupError(Exception):
    """A pod the decision needs could not be read: the webhook cannot decide."""


class Webhook:
    def __init__(self, kube: Kube, agent: str = admission.AGENT_ACCOUNT) -> None:
        self.kube = kube
        self.agent = agent
        self.reviews = asyncio.Semaphore(MAX_REVIEWS)

    async def pod(self, key: admission.PodKey) -> dict[str, Any] | None:
        try:
            return await self.kube.call(
                Operation.POD_GET, self.kube.core.read_namespaced_pod, key.name, key.namespace
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise PodLookupError(f"pod {key.namespace}/{key.name}: {exc}") from exc

    async def review(self, request: dict[str, Any]) -> admission.Verdict:
        keys = admission.lookups(request, self.agent)
        found = await asyncio.gather(*(self.pod(key) for key in keys))
        return admission.decide(request, dict(zip(keys, found, strict=True)), self.agent)

    async def validate(self, http: web.Request) -> web.Response:
        """Answer one AdmissionReview. Every byte may come from any pod that reaches the port
        (the NetworkPolicy admits the API servers only): the body is bounded in size and
        time before it is read, and parsed off the event loop, one review at a time."""
        if (http.content_length or 0) > MAX_BODY:
            return _refused(413, f"a body over {MAX_BODY} bytes")
        try:
            async with asyncio.timeout(BODY_TIMEOUT):
                body = await http.read()
        except web.HTTPRequestEntityTooLarge:
            return _refused(413, f"a body over {MAX_BODY} bytes")
        except TimeoutError:
            return _refused(408, f"a body not sent within {BODY_TIMEOUT:g} s")
        async with self.reviews:
            try:
                review = await asyncio.to_thread(json.loads, body)
                request = review["request"]
                uid = str(request["uid"])
            except (ValueError, KeyError, TypeError):
                return web.Response(status=400, text="not an AdmissionReview v1\n")
            return await self._answer(request, uid)

    async def _answer(self, request: dict[str, Any], uid: str) -> web.Response:
        try:
            verdict = await self.review(request)
        except PodLookupError as exc:
            log.warning("cannot decide %s: %s", _describe(request), exc)
            return web.Response(status=503, text=f"cannot decide: {exc}\n")
        response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
        if not verdict.allowed:
            log.info("denied %s: %s", _describe(request), verdict.message)
            response["status"] = {"code": 403, "reason": "Forbidden", "message": verdict.message}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )


def _refused(status: int, why: str) -> web.Response:
    """Refuse a request before its body is read, and close its connection (the rest of the
    body is never read)."""
    response = web.Response(status=status, text=f"refused: {why}\n")
    response.force_close()
    return response


def _describe(request: dict[str, Any]) -> str:
    user = (request.get("userInfo") or {}).get("username")
    resource = (request.get("resource") or {}).get("resource")
    where = "/".join(p for p in (request.get("namespace"), request.get("name")) if p)
    return f"{request.get('operation')} {resource} {where} by {user}"


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def make_app(webhook: Webhook) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/validate", webhook.validate)
    app.router.add_get("/healthz", _ok)
    app.router.add_get("/readyz", _ok)
    return app


async def _follow_certificate(tls: Tls, ctx: ssl.SSLContext) -> None:
    """Load a renewed certificate into the serving context (new handshakes use it)."""
    seen = tls.stamp()
    while True:
        await asyncio.sleep(CERT_CHECK_INTERVAL)
        try:
            stamp = tls.stamp()
            if stamp != seen:
                ctx.load_cert_chain(tls.cert_file, tls.key_file)
                seen = stamp
                log.info("serving certificate %s renewed", tls.cert_file)
        except (OSError, ssl.SSLError) as exc:  # mid-update: the next check reads it whole
            log.warning("cannot read the serving certificate: %s", exc)


async def serve(settings: WebhookSettings) -> int:
    tls = Tls.of(settings)
    listen = settings.listen
    try:
        ctx = tls.context()
    except (OSError, ssl.SSLError) as exc:
        log.error("cannot load the serving certificate: %s", exc)
        return EXIT_USAGE

    async def serve_tls(kube: Kube) -> web.AppRunner:
        webhook = Webhook(kube, settings.agent_account)
        runner = web.AppRunner(make_app(webhook), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = CappedSite(runner, listen, MAX_CONNECTIONS, ssl_context=ctx)
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        port = site.port
        log.info("listening on https://%s:%d", listen.host, port, extra={"fields": {"port": port}})
        return runner

    async def start(_: Kube) -> Running:
        return Running({"certificate": _follow_certificate(tls, ctx)})

    return await run_program(
        Program(
            connect=lambda: Kube.connect(settings.kubeconfig),
            serve=serve_tls,
            listener=str(settings.listen),
            start=start,
            close=Kube.close,
        )
    )


def main(settings: WebhookSettings) -> int:
    """``drain-guard webhook``: serve until SIGTERM/SIGINT."""
    configure_logging(settings.log_format, "INFO")
    return asyncio.run(serve(settings))


def refuse(log_format: LogFormat, error: SettingsError) -> int:
    """A bad flag: one line of the pod's log, in the format it asked for (exit 2)."""
    configure_logging(log_format, "INFO")
    log.error("%s", error)
    return EXIT_USAGE
