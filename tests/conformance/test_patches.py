"""Every patch type the agent and the MCO actors send: JSON Patch with ``test`` (the agent's
guarded hold and release), merge patch (Events, builds, the node controller), strategic merge
patch (the daemon's annotations) and what a server refuses."""

from __future__ import annotations

from tests.conformance.client import JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, Client
from tests.conformance.objects import node

KEY = "machineconfiguration.openshift.io/desiredDrain"
POINTER = "/metadata/annotations/machineconfiguration.openshift.io~1desiredDrain"


async def _node(admin: Client, ns: str, annotations: dict[str, str]) -> str:
    body = node(f"{ns}-n0")
    body["metadata"]["annotations"] = annotations
    await admin.ok("POST", "/api/v1/nodes", body)
    return f"/api/v1/nodes/{ns}-n0"


async def test_json_patch_applies_when_its_test_holds(admin: Client, ns: str) -> None:
    path = await _node(admin, ns, {KEY: "drain-a"})
    patched = await admin.ok(
        "PATCH",
        path,
        [
            {"op": "test", "path": POINTER, "value": "drain-a"},
            {"op": "add", "path": POINTER, "value": "hold-a"},
        ],
        content_type=JSON_PATCH,
    )
    assert patched["metadata"]["annotations"][KEY] == "hold-a"


async def test_json_patch_whose_test_fails_is_422_and_changes_nothing(
    admin: Client, ns: str
) -> None:
    path = await _node(admin, ns, {KEY: "drain-b"})
    before = await admin.ok("GET", path)
    answer = await admin.patch(
        path,
        [
            {"op": "test", "path": POINTER, "value": "drain-a"},
            {"op": "add", "path": POINTER, "value": "hold-a"},
        ],
        JSON_PATCH,
    )
    assert answer.status == 422
    assert answer.reason == "Invalid"
    assert answer.body["status"] == "Failure"
    after = await admin.ok("GET", path)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_json_patch_testing_the_resource_version(admin: Client, ns: str) -> None:
    path = await _node(admin, ns, {})
    current = await admin.ok("GET", path)
    rv = current["metadata"]["resourceVersion"]
    test = {"op": "test", "path": "/metadata/resourceVersion", "value": rv}
    add = {"op": "add", "path": "/metadata/annotations", "value": {KEY: "hold-a"}}
    first = await admin.patch(path, [test, add], JSON_PATCH)
    assert first.status == 200
    again = await admin.patch(path, [test, add], JSON_PATCH)
    assert again.status in (409, 422)
    assert again.reason in ("Conflict", "Invalid")


async def test_json_patch_remove_of_a_missing_member_is_422(admin: Client, ns: str) -> None:
    path = await _node(admin, ns, {"other": "x"})
    answer = await admin.patch(path, [{"op": "remove", "path": POINTER}], JSON_PATCH)
    assert answer.status == 422
    assert answer.reason == "Invalid"


async def test_merge_patch_sets_and_null_removes(admin: Client, ns: str) -> None:
    path = await _node(admin, ns, {KEY: "drain-a", "keep": "yes"})
    patched = await admin.ok(
        "PATCH",
        path,
        {"metadata": {"annotations": {KEY: None, "new": "1"}}},
        content_type=MERGE_PATCH,
    )
    assert patched["metadata"]["annotations"] == {"keep": "yes", "new": "1"}


async def test_strategic_merge_patch_merges_lists_by_key(admin: Client, ns: str) -> None:
    """Node conditions merge by ``type`` (patchMergeKey), ``$patch: delete`` removes one."""
    path = await _node(admin, ns, {})
    conditions = [
        {"type": "Ready", "status": "True"},
        {"type": "DiskPressure", "status": "False"},
    ]
    await admin.ok(
        "PATCH", path + "/status", {"status": {"conditions": conditions}}, content_type=MERGE_PATCH
    )
    patched = await admin.ok(
        "PATCH",
        path + "/status",
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "DiskPressure", "$patch": "delete"},
                    {"type": "PIDPressure", "status": "False"},
                ]
            }
        },
        content_type=STRATEGIC_PATCH,
    )
    assert sorted((c["type"], c["status"]) for c in patched["status"]["conditions"]) == [
        ("PIDPressure", "False"),
        ("Ready", "False"),
    ]


async def test_strategic_merge_patch_replaces_lists_without_a_merge_key(
    admin: Client, ns: str
) -> None:
    """A Node's taints have no patch strategy: a strategic merge patch replaces them whole
    (the drain controller's cordon writes ``spec.unschedulable``, never a taint list)."""
    path = await _node(admin, ns, {})
    taints = [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]
    await admin.ok("PATCH", path, {"spec": {"taints": taints}}, content_type=MERGE_PATCH)
    patched = await admin.ok(
        "PATCH",
        path,
        {"spec": {"taints": [{"key": "c", "effect": "NoSchedule"}]}},
        content_type=STRATEGIC_PATCH,
    )
    assert [t["key"] for t in patched["spec"]["taints"]] == ["c"]
    annotated = await admin.ok(
        "PATCH", path, {"metadata": {"annotations": {KEY: "drain-a"}}}, content_type=STRATEGIC_PATCH
    )
    assert annotated["metadata"]["annotations"] == {KEY: "drain-a"}


async def test_a_merge_patch_replaces_a_list_whole(admin: Client, ns: str) -> None:
    path = await _node(admin, ns, {})
    taints = [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]
    await admin.ok("PATCH", path, {"spec": {"taints": taints}}, content_type=MERGE_PATCH)
    patched = await admin.ok(
        "PATCH",
        path,
        {"spec": {"taints": [{"key": "c", "effect": "NoSchedule"}]}},
        content_type=MERGE_PATCH,
    )
    assert [t["key"] for t in patched["spec"]["taints"]] == ["c"]


async def test_an_unknown_patch_type_is_415(admin: Client, ns: str) -> None:
    path = await _node(admin, ns, {})
    answer = await admin.patch(path, {"metadata": {}}, "application/x-unknown-patch")
    assert answer.status == 415
    assert answer.reason == "UnsupportedMediaType"
    assert answer.body["status"] == "Failure"
