"""client-go's informer for the simulated MCO's controllers: a list, then a watch from its
resourceVersion, re-listed on 410 or a broken stream, its cache handed to handlers."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from drain_guard_sim.actors.mco import JsonObj, api_exception, read_json

log = logging.getLogger(__name__)

ListFn = Callable[..., Awaitable[Any]]
Handler = Callable[[str, JsonObj, JsonObj | None], None]


@dataclass
class Informer:
    """List-then-watch cache of one resource (a client-go SharedInformer in miniature).

    ``handler(event_type, obj, old)`` runs for every change after the cache is updated.
    A 410 or a broken stream re-lists, as client-go's reflector does.
    """

    list_fn: ListFn
    handler: Handler | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    watch_timeout: int = 300
    cache: dict[str, JsonObj] = field(default_factory=dict)
    synced: asyncio.Event = field(default_factory=asyncio.Event)

    @staticmethod
    def key(obj: Mapping[str, Any]) -> str:
        meta = obj["metadata"]
        ns = meta.get("namespace")
        return f"{ns}/{meta['name']}" if ns else str(meta["name"])

    async def run(self) -> None:
        backoff = 0.05
        while True:
            try:
                rv = await self._list()
                backoff = 0.05
                while True:
                    rv = await self._watch(rv)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: re-list after a short, jittered backoff
                if not (isinstance(exc, ApiException) and exc.status == 410):
                    log.debug("informer %s: %r; re-listing", self.list_fn.__name__, exc)
                    await asyncio.sleep(backoff * (1 + random.random()))
                    backoff = min(backoff * 2, 2.0)

    async def _list(self) -> str:
        data = await read_json(await self.list_fn(**self.kwargs, _preload_content=False))
        fresh = {self.key(item): item for item in data.get("items") or []}
        old_cache = self.cache
        self.cache = fresh
        for key, obj in fresh.items():
            old = old_cache.get(key)
            if old is None or old["metadata"].get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                self._notify("ADDED" if old is None else "MODIFIED", obj, old)
        for key, obj in old_cache.items():
            if key not in fresh:
                self._notify("DELETED", obj, obj)
        self.synced.set()
        return str(data["metadata"]["resourceVersion"])

    async def _watch(self, rv: str) -> str:
        resp = await self.list_fn(
            **self.kwargs,
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout,
            _preload_content=False,
        )
        try:
            if not 200 <= resp.status <= 299:
                raise api_exception(resp.status, await resp.read())
            while True:
                line = await resp.content.readline()
                if not line:
                    return rv
                event = json.loads(line)
                obj = event["object"]
                etype = event["type"]
                if etype == "ERROR":
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                rv = str(obj["metadata"]["resourceVersion"])
                if etype == "BOOKMARK":
                    continue
                key = self.key(obj)
                old = self.cache.get(key)
                if etype == "DELETED":
                    self.cache.pop(key, None)
                else:
                    self.cache[key] = obj
                self._notify(etype, obj, old)
        finally:
            resp.release()

    def _notify(self, etype: str, obj: JsonObj, old: JsonObj | None) -> None:
        if self.handler is not None:
            try:
                self.handler(etype, obj, old)
            except Exception:
                log.exception("informer handler failed")
