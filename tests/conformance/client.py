"""A plain HTTP client of the API server, built from a kubeconfig, as a client sees the server.

The conformance suite asks both servers the same raw questions and compares the answers byte
for byte where it matters (status codes, ``Status`` bodies, headers such as ``Retry-After``),
so it speaks HTTP through aiohttp instead of a generated client that would hide them. The
kubeconfig is read as client-go reads it: the server, its CA (file or data), and a bearer
token (``token``/``tokenFile``) or a client certificate and key (files or data).
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.helpers import WAIT

JsonObj = dict[str, Any]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: Any  # the decoded JSON, or the text when it is not JSON

    @property
    def reason(self) -> str | None:
        """A ``Status`` body's reason (None for any other body)."""
        return self.body.get("reason") if isinstance(self.body, dict) else None


def _file_or_data(entry: Mapping[str, Any], key: str, scratch: Path) -> str | None:
    """A kubeconfig's ``key`` (a path) or ``key-data`` (base64), as a path."""
    if entry.get(key):
        return str(entry[key])
    data = entry.get(f"{key}-data")
    if not data:
        return None
    path = scratch / key
    path.write_bytes(base64.b64decode(data))
    path.chmod(0o600)
    return str(path)


class Client:
    """One identity's HTTP session with the API server of ``kubeconfig``."""

    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        context_name = config["current-context"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        self._scratch = tempfile.TemporaryDirectory(prefix="conformance-client-")
        scratch = Path(self._scratch.name)
        self.url: str = cluster["server"]
        self._ssl: ssl.SSLContext | None = None
        if self.url.startswith("https:"):
            self._ssl = ssl.create_default_context(
                cafile=_file_or_data(cluster, "certificate-authority", scratch)
            )
            cert = _file_or_data(user, "client-certificate", scratch)
            if cert is not None:
                self._ssl.load_cert_chain(cert, _file_or_data(user, "client-key", scratch))
        self._headers: dict[str, str] = {}
        token = user.get("token") or (
            Path(user["tokenFile"]).read_text().strip() if user.get("tokenFile") else None
        )
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        self._session = aiohttp.ClientSession(
            base_url=self.url,
            headers=self._headers,
            connector=aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else False),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
        self._scratch.cleanup()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use the client as 'async with'"
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Response:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        async with self.session.request(
            method, path, data=data, params=params, headers=headers
        ) as resp:
            text = await resp.text()
            try:
                decoded: Any = json.loads(text)
            except ValueError:
                decoded = text
            return Response(resp.status, dict(resp.headers), decoded)

    async def get(self, path: str, **params: str) -> Response:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: Any, **params: str) -> Response:
        return await self.request("POST", path, body, params=params)

    async def put(self, path: str, body: Any, **params: str) -> Response:
        return await self.request("PUT", path, body, params=params)

    async def patch(self, path: str, body: Any, content_type: str, **params: str) -> Response:
        return await self.request("PATCH", path, body, params=params, content_type=content_type)

    async def delete(self, path: str, body: Any = None, **params: str) -> Response:
        return await self.request("DELETE", path, body, params=params)

    async def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> JsonObj:
        """The body of a request that must succeed (2xx); the answer in the failure if not."""
        resp = await self.request(method, path, body, **kwargs)
        assert 200 <= resp.status < 300, f"{method} {path}: {resp.status} {resp.body}"
        assert isinstance(resp.body, dict)
        return resp.body

    async def watch(self, path: str, **params: str) -> AsyncIterator[JsonObj]:
        """Every event of a watch (``watch=1``) until the server ends the stream."""
        async with self.session.get(
            path, params={"watch": "1", **params}, headers={"Accept": "application/json"}
        ) as resp:
            assert resp.status == 200, f"watch {path}: {resp.status} {await resp.text()}"
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)

    async def wait_gone(self, path: str) -> None:
        """Wait (on a watch, no polling) until the object at ``path`` is deleted."""
        collection, _, name = path.rpartition("/")
        selector = f"metadata.name={name}"

        async def wait() -> None:
            while True:
                listed = await self.ok("GET", collection, params={"fieldSelector": selector})
                if not listed["items"]:
                    return
                rv = listed["metadata"]["resourceVersion"]
                async for event in self.watch(
                    collection, fieldSelector=selector, resourceVersion=rv, timeoutSeconds="30"
                ):
                    if event["type"] == "DELETED":
                        return

        await asyncio.wait_for(wait(), WAIT)

    async def wait_for(self, path: str, predicate: Callable[[JsonObj], bool]) -> JsonObj:
        """Wait (on a watch, no polling) until the object at ``path`` satisfies ``predicate``;
        returns it. The object's collection is watched with a name field selector."""
        collection, _, name = path.rpartition("/")

        async def wait() -> JsonObj:
            while True:
                selector = {"fieldSelector": f"metadata.name={name}"}
                listed = await self.ok("GET", collection, params=selector)
                for item in listed["items"]:
                    if predicate(item):
                        return dict(item)
                rv = listed["metadata"]["resourceVersion"]
                async for event in self.watch(
                    collection,
                    fieldSelector=f"metadata.name={name}",
                    resourceVersion=rv,
                    timeoutSeconds="30",
                ):
                    if event["type"] in ("ADDED", "MODIFIED") and predicate(event["object"]):
                        return dict(event["object"])

        return await asyncio.wait_for(wait(), WAIT)
