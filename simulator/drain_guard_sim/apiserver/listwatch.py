"""The API server's LIST and WATCH over HTTP: selectors, pages (the continue token), Tables,
a watch's start (its resourceVersion, timeout, an injected expiry) and what each user was
served."""

from __future__ import annotations

import base64
import builtins
import json
import random
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from drain_guard_sim.apiserver import errors, labels, requestinfo, watchstream
from drain_guard_sim.apiserver.errors import ApiError
from drain_guard_sim.apiserver.faults import FaultKind, Faults
from drain_guard_sim.apiserver.fieldselectors import parse_field_selector, parse_labels
from drain_guard_sim.apiserver.requestinfo import Target, json_response
from drain_guard_sim.apiserver.resources import ResourceType
from drain_guard_sim.apiserver.store import Store
from drain_guard_sim.apiserver.tables import to_table
from drain_guard_sim.apiserver.watchcache import Watcher

JsonObj = dict[str, Any]


class ListWatch:
    """The LIST and WATCH part of :class:`~drain_guard_sim.apiserver.server.SimApiServer` (which
    holds the state)."""

    store: Store
    faults: Faults
    _rng: random.Random
    bookmark_interval: float
    watch_timeout: float | None
    served: Counter[tuple[str, str]]
    served_bytes: Counter[tuple[str, str]]
    serve_hooks: builtins.list[Callable[[str, str, JsonObj], None]]

    def _list(self, request: web.Request, target: Target, user: str) -> web.Response:
        rt = target.rt
        store = self.store
        query = request.query
        selected = parse_labels(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector", ""), rt)
        at = None
        if query.get("resourceVersionMatch") == "Exact":
            at = requestinfo.resource_version(query.get("resourceVersion", ""))
        items = store.list(
            rt, target.namespace, label_selector=selected, field_selector=fields, at=at
        )
        rv = store.resource_version if at is None else at
        metadata: JsonObj = {"resourceVersion": str(rv)}
        cont = query.get("continue")
        if cont:
            cont_rv, ns, name = decode_continue(cont)
            rv = cont_rv
            metadata["resourceVersion"] = str(cont_rv)
            items = [
                i
                for i in items
                if (i["metadata"].get("namespace", ""), i["metadata"]["name"]) > (ns, name)
            ]
        limit_text = query.get("limit")
        if limit_text:
            try:
                limit = int(limit_text)
            except ValueError:
                raise errors.bad_request(f"invalid limit {limit_text!r}") from None
            if 0 < limit < len(items):
                last = items[limit - 1]["metadata"]
                metadata["continue"] = encode_continue(rv, last.get("namespace", ""), last["name"])
                metadata["remainingItemCount"] = len(items) - limit
                items = items[:limit]
        response = self._maybe_table(request, rt, items, single=False, metadata=metadata)
        self._count_served(
            user, requestinfo.resource_label(target), items, response.content_length or 0
        )
        return response

    def _count_served(self, user: str, resource: str, objs: Iterable[JsonObj], size: int) -> None:
        n = 0
        for obj in objs:
            n += 1
            for hook in self.serve_hooks:
                hook(user, resource, obj)
        self.served[(user, resource)] += n
        self.served_bytes[(user, resource)] += size

    def _maybe_table(
        self,
        request: web.Request,
        rt: ResourceType,
        items: builtins.list[JsonObj],
        *,
        single: bool,
        metadata: JsonObj | None = None,
    ) -> web.Response:
        accept = request.headers.get("Accept", "")
        if "as=Table" in accept:
            include = request.query.get("includeObject", "Metadata")
            table = to_table(rt, items, include, self.store.clock())
            table["metadata"] = dict(
                metadata or {"resourceVersion": str(self.store.resource_version)}
            )
            if single:
                table["metadata"] = {"resourceVersion": items[0]["metadata"]["resourceVersion"]}
            return json_response(table)
        if single:
            return json_response(items[0])
        return json_response(
            {
                "kind": f"{rt.kind}List",
                "apiVersion": rt.api_version,
                "metadata": metadata or {"resourceVersion": str(self.store.resource_version)},
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, target: Target, user: str) -> web.StreamResponse:
        rt = target.rt
        query = request.query
        rv = query.get("resourceVersion")
        bookmarks = requestinfo.parse_bool("allowWatchBookmarks", query.get("allowWatchBookmarks"))
        send_initial = requestinfo.parse_bool("sendInitialEvents", query.get("sendInitialEvents"))
        timeout_text = query.get("timeoutSeconds")
        if timeout_text:
            try:
                timeout = float(int(timeout_text))
            except ValueError:
                raise errors.bad_request(f"invalid timeoutSeconds {timeout_text!r}") from None
        elif self.watch_timeout is not None:
            timeout = self.watch_timeout
        else:
            timeout = 1800.0 * (1.0 + self._rng.random())
        selected: labels.Selector = parse_labels(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector", ""), rt)
        resource = requestinfo.resource_label(target)
        expired: ApiError | None = None
        watcher: Watcher | None = None
        if rv not in (None, "", "0") and self.faults.fire(
            FaultKind.WATCH_EXPIRED, user, "watch", resource
        ):
            expired = errors.expired(
                f"too old resource version: {rv} ({self.store.resource_version})"
            )
        else:
            try:
                watcher = self.store.watch(
                    rt,
                    target.namespace,
                    resource_version=None if send_initial else rv,
                    label_selector=selected,
                    field_selector=fields,
                    name=target.name,
                    user=user,
                )
            except ApiError as err:
                if err.code != 410:
                    raise
                expired = err

        def count(obj: JsonObj | None, size: int) -> None:
            if obj is None:  # the bookmarks' bytes
                self.served_bytes[(user, resource)] += size
            else:
                self._count_served(user, resource, (obj,), size)

        return await watchstream.stream(
            request,
            self.store,
            rt,
            watcher,
            expired,
            timeout=timeout,
            bookmark_interval=self.bookmark_interval,
            bookmarks=bookmarks,
            send_initial=send_initial,
            count=count,
        )


def encode_continue(rv: int, ns: str, name: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{ns}/{name}\x00"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        ns, _, name = str(data["start"]).rstrip("\x00").partition("/")
        return int(data["rv"]), ns, name
    except (ValueError, KeyError, TypeError) as err:
        raise errors.bad_request(f"continue key is not valid: {err}") from None
