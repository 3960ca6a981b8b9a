"""resourceVersion as a client relies on it: optimistic concurrency (409 Conflict on a stale
update or delete precondition), lists at a resourceVersion (``resourceVersionMatch``),
watches from a resourceVersion, and bookmarks. (410 after compaction is not asked: a real
server's watch cache answers it by its own window, docs/simulator-conformance.md.)"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conformance.client import Client, JsonObj
from tests.conformance.objects import pod, pods_path
from tests.helpers import WAIT


def _deletion_mark(event: JsonObj) -> bool:
    meta = event["object"]["metadata"]
    return event["type"] == "MODIFIED" and meta.get("deletionTimestamp") is not None


def _conflict(name: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'Operation cannot be fulfilled on pods "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        "reason": "Conflict",
        "details": {"name": name, "kind": "pods"},
        "code": 409,
    }


async def test_an_update_with_a_stale_resource_version_is_409_conflict(
    admin: Client, ns: str
) -> None:
    created = await admin.ok("POST", pods_path(ns), pod("p", f"{ns}-n0"))
    first = dict(created, metadata={**created["metadata"], "labels": {"v": "1"}})
    updated = await admin.ok("PUT", pods_path(ns, "p"), first)
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    stale = dict(created, metadata={**created["metadata"], "labels": {"v": "2"}})
    answer = await admin.put(pods_path(ns, "p"), stale)
    assert answer.status == 409
    assert answer.body == _conflict("p")
    current = await admin.ok("GET", pods_path(ns, "p"))
    assert current["metadata"]["labels"] == {"v": "1"}


async def test_a_delete_with_a_stale_precondition_is_409_conflict(admin: Client, ns: str) -> None:
    created = await admin.ok("POST", pods_path(ns), pod("p", f"{ns}-n0"))
    await admin.ok(
        "PATCH",
        pods_path(ns, "p"),
        {"metadata": {"labels": {"moved": "on"}}},
        content_type="application/merge-patch+json",
    )
    stale = {"preconditions": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    answer = await admin.delete(pods_path(ns, "p"), stale)
    assert answer.status == 409
    assert answer.reason == "Conflict"
    current = await admin.ok("GET", pods_path(ns, "p"))
    assert answer.body["message"] == (
        'Operation cannot be fulfilled on Pod "p": the ResourceVersion in the precondition '
        f"({created['metadata']['resourceVersion']}) does not match the ResourceVersion in "
        f"record ({current['metadata']['resourceVersion']}). The object might have been modified"
    )
    assert answer.body["details"] == {"name": "p", "kind": "Pod"}


async def test_list_not_older_than_a_resource_version(admin: Client, ns: str) -> None:
    created = await admin.ok("POST", pods_path(ns), pod("p", f"{ns}-n0"))
    rv = created["metadata"]["resourceVersion"]
    listed = await admin.ok(
        "GET", pods_path(ns), params={"resourceVersion": rv, "resourceVersionMatch": "NotOlderThan"}
    )
    assert int(listed["metadata"]["resourceVersion"]) >= int(rv)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["p"]


async def test_resource_version_match_without_a_resource_version_is_refused(
    admin: Client, ns: str
) -> None:
    answer = await admin.get(pods_path(ns), resourceVersionMatch="NotOlderThan")
    assert answer.status == 422
    assert answer.reason == "Invalid"
    assert answer.body["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
        "resourceVersionMatch is forbidden unless resourceVersion is provided"
    )
    assert answer.body["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion "
            "is provided",
            "field": "resourceVersionMatch",
        }
    ]
    watch = await admin.get(pods_path(ns), watch="1", resourceVersionMatch="NotOlderThan")
    assert watch.status == 422


async def test_a_watch_from_a_resource_version_sees_what_came_after_in_order(
    admin: Client, ns: str
) -> None:
    created = await admin.ok("POST", pods_path(ns), pod("p", f"{ns}-n0"))
    after = created["metadata"]["resourceVersion"]
    for value in ("1", "2"):
        await admin.ok(
            "PATCH",
            pods_path(ns, "p"),
            {"metadata": {"labels": {"v": value}}},
            content_type="application/merge-patch+json",
        )
    await admin.ok("DELETE", pods_path(ns, "p"))
    events: list[JsonObj] = []

    async def watch() -> None:
        async for event in admin.watch(pods_path(ns), resourceVersion=after):
            events.append(event)
            if event["type"] == "DELETED":
                return

    await asyncio.wait_for(watch(), WAIT)
    # A real server marks a pod deleted (deletionTimestamp) in one more MODIFIED before the
    # DELETED, even with no grace period; the simulator does not (docs: known differences).
    events = [e for e in events if not _deletion_mark(e)]
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert [e["object"]["metadata"].get("labels", {}).get("v") for e in events] == ["1", "2", "2"]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions)
    assert versions[0] > int(after)


async def test_a_list_at_an_exact_resource_version_shows_the_objects_then(
    admin: Client, ns: str
) -> None:
    created = await admin.ok("POST", pods_path(ns), pod("p", f"{ns}-n0"))
    old = created["metadata"]["resourceVersion"]
    await admin.ok(
        "PATCH",
        pods_path(ns, "p"),
        {"metadata": {"labels": {"v": "1"}}},
        content_type="application/merge-patch+json",
    )
    await admin.ok("POST", pods_path(ns), pod("q", f"{ns}-n0"))
    exact = {"resourceVersion": old, "resourceVersionMatch": "Exact"}
    then = await admin.ok("GET", pods_path(ns), params=exact)
    assert then["metadata"]["resourceVersion"] == old
    assert [(i["metadata"]["name"], i["metadata"].get("labels")) for i in then["items"]] == [
        ("p", created["metadata"].get("labels"))
    ]


async def test_the_initial_events_end_with_a_bookmark(admin: Client, ns: str) -> None:
    """A watch that asks for the initial events and bookmarks gets the objects, then a
    BOOKMARK annotated ``k8s.io/initial-events-end`` carrying a resourceVersion and nothing
    else of an object. (A watch without ``allowWatchBookmarks`` gets none:
    test_bookmarks.py, where one is due.)"""
    created = await admin.ok("POST", pods_path(ns), pod("p", f"{ns}-n0"))
    rv = created["metadata"]["resourceVersion"]
    initial = {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
    events: list[JsonObj] = []

    async def until_bookmark() -> None:
        async for event in admin.watch(
            pods_path(ns), allowWatchBookmarks="true", timeoutSeconds="30", **initial
        ):
            events.append(event)
            if event["type"] == "BOOKMARK":
                return

    await asyncio.wait_for(until_bookmark(), WAIT)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[0]["object"]["metadata"]["name"] == "p"
    mark = events[1]["object"]
    assert (mark["kind"], mark["apiVersion"]) == ("Pod", "v1")
    assert int(mark["metadata"]["resourceVersion"]) >= int(rv)
    assert mark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert set(mark["metadata"]) <= {"resourceVersion", "creationTimestamp", "annotations"}


async def test_a_selected_watch_sees_objects_enter_and_leave_its_selection(
    admin: Client, ns: str
) -> None:
    """A label-selected watch gets ADDED when a change makes an object match and DELETED when
    one makes it stop matching (the watch cache's filtering); a watch on ``spec.nodeName``
    (the agent's pod watch) sees only the pods bound to that node."""
    start = await admin.ok("GET", pods_path(ns))
    rv = start["metadata"]["resourceVersion"]
    await admin.ok("POST", pods_path(ns), pod("a", f"{ns}-n0", {"app": "x"}))
    await admin.ok("POST", pods_path(ns), pod("b", f"{ns}-n1", {"app": "y"}))
    for name, value in (("a", "y"), ("b", "x")):
        await admin.ok(
            "PATCH",
            pods_path(ns, name),
            {"metadata": {"labels": {"app": value}}},
            content_type="application/merge-patch+json",
        )
    await admin.ok("DELETE", pods_path(ns, "a"))

    async def seen(count: int, **params: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        async for event in admin.watch(pods_path(ns), resourceVersion=rv, **params):
            if not _deletion_mark(event):
                out.append((event["type"], event["object"]["metadata"]["name"]))
            if len(out) == count:
                return out
        return out

    by_label = await asyncio.wait_for(seen(3, labelSelector="app=x"), WAIT)
    assert by_label == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b")]
    by_node = await asyncio.wait_for(seen(3, fieldSelector=f"spec.nodeName={ns}-n0"), WAIT)
    assert by_node == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
