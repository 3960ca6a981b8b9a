"""The simulated MCO's pure parts: host tree, work queue, patches, rendered names."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.actors.mco import Timings, annotation_patch
from drain_guard_sim.actors.nodecontroller import rendered_name
from drain_guard_sim.actors.timeline import Timeline
from drain_guard_sim.actors.workqueue import WorkQueue

X = "registry.example/ocb-image@sha256:" + "a" * 64
Y = "registry.example/ocb-image@sha256:" + "b" * 64


def booted_origin(host: HostFS) -> Path:
    """Follow the cmdline's ostree= link inside the host root, as the agent must."""
    arg = next(a for a in host.cmdline_file.read_text().split() if a.startswith("ostree="))
    link = host.root / arg.removeprefix("ostree=/")
    target = os.readlink(link)
    assert target.startswith("/ostree/deploy/rhcos/deploy/")  # absolute, as on a real host
    return host.root / (target.lstrip("/") + ".origin")


def test_host_tree_layout(tmp_path: Path) -> None:
    host = HostFS(tmp_path / "h", X)
    assert "ostree=/ostree/boot.1/rhcos/" in host.cmdline_file.read_text()
    origin = booted_origin(host)
    assert (
        origin.read_text()
        == f"[origin]\ncontainer-image-reference=ostree-unverified-registry:{X}\n"
    )
    assert (origin.parent / origin.name.removesuffix(".origin")).is_dir()
    assert host.booted_image == X


def test_reboot_into_new_image_switches_deployment(tmp_path: Path) -> None:
    host = HostFS(tmp_path / "h", X)
    before = host.cmdline_file.read_text()
    first = host.booted
    host.reboot_into(Y)
    assert host.cmdline_file.read_text() != before
    assert "ostree=/ostree/boot.0/rhcos/" in host.cmdline_file.read_text()
    assert booted_origin(host).read_text().endswith(f":{Y}\n")
    assert host.booted != first
    assert [d.image for d in host.deployments] == [X, Y]  # the rollback deployment is kept
    assert not (tmp_path / "h" / "ostree" / "boot.1").exists()


def test_reboot_into_same_image_keeps_deployment(tmp_path: Path) -> None:
    host = HostFS(tmp_path / "h", X)
    first = host.booted
    host.reboot_into(X)
    assert host.booted == first
    assert host.boot_count == 1
    assert booted_origin(host).read_text().endswith(f":{X}\n")


def test_only_two_deployments_are_kept(tmp_path: Path) -> None:
    host = HostFS(tmp_path / "h", X)
    host.reboot_into(Y)
    oldest = host.origin_file(host.deployments[0])
    host.reboot_into(X)
    assert len(host.deployments) == 2
    assert not oldest.exists()
    assert host.booted_image == X


def test_rpm_ostree_status_script(tmp_path: Path) -> None:
    host = HostFS(tmp_path / "h", X)
    host.reboot_into(Y)
    script = host.write_rpm_ostree_status()
    out = json.loads(subprocess.run([str(script)], capture_output=True, check=True).stdout)
    booted = [d for d in out["deployments"] if d["booted"]]
    assert [d["container-image-reference"] for d in booted] == [f"ostree-unverified-registry:{Y}"]
    assert booted[0]["container-image-reference-digest"] == "sha256:" + "b" * 64
    assert len(out["deployments"]) == 2


def test_mcd_on_disk_config_round_trip(tmp_path: Path) -> None:
    host = HostFS(tmp_path / "h", X)
    assert host.read_mcd_current_config() is None
    host.write_mcd_current_config("rendered-worker-1", X)
    assert host.read_mcd_current_config() == ("rendered-worker-1", X)


def test_annotation_patch_sends_only_changes_without_resource_version() -> None:
    old = {"a": "1", "b": "2"}
    assert annotation_patch(old, {"a": "1"}) is None
    assert annotation_patch(old, {"a": "3", "b": "2", "c": None}) == {
        "metadata": {"annotations": {"a": "3"}}
    }
    assert annotation_patch(old, {"b": None}) == {"metadata": {"annotations": {"b": None}}}


def test_rendered_name_depends_on_inputs_only() -> None:
    a = {"metadata": {"name": "00-worker"}, "spec": {"x": 1}}
    b = {"metadata": {"name": "99-worker"}, "spec": {"y": 2}}
    name = rendered_name("worker", [a, b])
    assert name == rendered_name("worker", [b, a])
    assert name != rendered_name("worker", [a])
    assert name.startswith("rendered-worker-")
    assert len(name.removeprefix("rendered-worker-")) == 32


async def test_work_queue_dedupes_and_requeues_dirty_keys() -> None:
    q = WorkQueue(0.001, 1.0)
    q.add("n1")
    q.add("n1")
    assert await q.get() == "n1"
    q.add("n1")  # added while processing: comes back only after done()
    q.add("n2")
    assert await q.get() == "n2"
    q.done("n2")
    q.done("n1")
    assert await q.get() == "n1"


async def test_work_queue_add_after_keeps_earliest() -> None:
    q = WorkQueue(0.001, 1.0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    q.add_after("n", 10.0)
    q.add_after("n", 0.01)
    q.add_after("n", 5.0)
    async with asyncio.timeout(2):
        assert await q.get() == "n"
    assert loop.time() - start < 5


async def test_work_queue_rate_limit_grows_and_forget_resets() -> None:
    q = WorkQueue(0.001, 1.0)
    for expected in range(3):
        assert q.num_requeues("n") == expected
        q.add_rate_limited("n")
        async with asyncio.timeout(2):
            key = await q.get()
        q.done(key)
    assert q.num_requeues("n") == 3
    q.forget("n")
    assert q.num_requeues("n") == 0


async def test_timeline_wait_for_sees_past_and_future_entries() -> None:
    tl = Timeline()
    tl.add("a", None, "first")
    assert (await tl.wait_for(lambda e: e.message == "first")).actor == "a"
    waiter = asyncio.create_task(tl.wait_for(lambda e: e.message == "later"))
    await asyncio.sleep(0)
    assert not waiter.done()
    tl.add("b", "worker-0", "later")
    async with asyncio.timeout(1):
        entry = await waiter
    assert entry.node == "worker-0"
    assert tl.select(actor="b") == [entry]


@pytest.mark.parametrize("factor", [1.0, 0.01])
def test_timings_scale(factor: float) -> None:
    t = Timings().scaled(factor)
    assert t.s(t.mcd_poll) == pytest.approx(10 * factor)
    assert t.s(t.mcd_drain_timeout) == pytest.approx(3600 * factor)
