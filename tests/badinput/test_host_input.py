"""Host trees the agent cannot read, and the RHCOS layout it must read.

A booted image that cannot be read makes the no-op guard abstain: the agent lets the
same-image drain through rather than hold on a guess, logs why in one line, counts it as
``invalid_input_total{kind="host_file"}``, shows ``image_match`` -1, and keeps running.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from drain_guard import protocol
from drain_guard.node.host import read_booted_image
from drain_guard_sim.actors.hostfs import HostFS
from drain_guard_sim.apiserver.server import SimApiServer
from tests.helpers import CONFIG_B, IMAGE_A, StartAgent, agent_writes, mcd_request, metric

DIGEST = "sha256:" + "6" * 64
REFERENCE = f"ostree-unverified-registry:quay.io/openshift/ocb-image@{DIGEST}"
CHECKSUM, BOOTCSUM = "c" * 64, "b" * 64


def _rhcos_tree(root: Path, ostree_link: str) -> Path:
    """RHCOS: the deployments live under /sysroot/ostree and /ostree links there."""
    deploy = root / "sysroot" / "ostree" / "deploy" / "rhcos" / "deploy"
    (deploy / f"{CHECKSUM}.0").mkdir(parents=True)
    (deploy / f"{CHECKSUM}.0.origin").write_text(
        f"[origin]\ncontainer-image-reference={REFERENCE}\n"
    )
    boot = root / "sysroot" / "ostree" / "boot.1" / "rhcos" / BOOTCSUM
    boot.mkdir(parents=True)
    (boot / "0").symlink_to(f"/ostree/deploy/rhcos/deploy/{CHECKSUM}.0")
    (root / "ostree").symlink_to(ostree_link)
    cmdline = root / "proc-cmdline"
    cmdline.write_text(f"rw ostree=/ostree/boot.1/rhcos/{BOOTCSUM}/0\n")
    return cmdline


@pytest.mark.parametrize("link", ["sysroot/ostree", "/sysroot/ostree"])
def test_rhcos_layout_with_ostree_linked_to_the_physical_root(tmp_path: Path, link: str) -> None:
    cmdline = _rhcos_tree(tmp_path, link)
    booted = read_booted_image(tmp_path, cmdline)
    assert (booted.digest, booted.error) == (DIGEST, None)


def test_rhcos_layout_link_leaving_the_host_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "host"
    root.mkdir()
    cmdline = _rhcos_tree(root, "../sysroot/ostree")  # one level above the host root
    booted = read_booted_image(root, cmdline)
    assert booted.digest is None
    assert "outside the host root" in str(booted.error)


def test_deployment_elsewhere_under_sysroot_is_refused(tmp_path: Path) -> None:
    cmdline = _rhcos_tree(tmp_path, "sysroot/ostree")
    elsewhere = tmp_path / "sysroot" / "elsewhere" / f"{CHECKSUM}.0"
    elsewhere.mkdir(parents=True)
    link = tmp_path / "sysroot" / "ostree" / "boot.1" / "rhcos" / BOOTCSUM / "0"
    link.unlink()
    link.symlink_to(f"/sysroot/elsewhere/{CHECKSUM}.0")
    booted = read_booted_image(tmp_path, cmdline)
    assert booted.digest is None
    assert "not /ostree/deploy/" in str(booted.error)


def _no_ostree_arg(host: HostFS) -> None:
    host.cmdline_file.write_text("BOOT_IMAGE=/vmlinuz rw root=UUID=sim\n")


def _origin_missing(host: HostFS) -> None:
    host.origin_file().unlink()


def _origin_garbage(host: HostFS) -> None:
    host.origin_file().write_bytes(b"\x00\xff\xfe not a key file [[[\n")


def _origin_without_reference(host: HostFS) -> None:
    host.origin_file().write_text("[origin]\nrefspec=fedora:fedora/x86_64/coreos/stable\n")


def _origin_tag_only(host: HostFS) -> None:
    ref = "ostree-unverified-registry:quay.io/openshift/ocb-image:latest"
    host.origin_file().write_text(f"[origin]\ncontainer-image-reference={ref}\n")


def _origin_unknown_transport(host: HostFS) -> None:
    ref = f"carrier-pigeon:quay.io/openshift/ocb-image@{DIGEST}"
    host.origin_file().write_text(f"[origin]\ncontainer-image-reference={ref}\n")


def _boot_links(host: HostFS) -> list[Path]:
    return sorted(p for p in (host.root / "ostree").glob("boot.*/*/*/*") if p.is_symlink())


def _link_loop(host: HostFS) -> None:
    for link in _boot_links(host):
        link.unlink()
        link.symlink_to(link.name)


def _link_escape(host: HostFS) -> None:
    for link in _boot_links(host):
        link.unlink()
        link.symlink_to("../../../../../../../../etc")


@pytest.mark.parametrize(
    ("corrupt", "fragment"),
    [
        (_no_ostree_arg, "no ostree= argument"),
        (_origin_missing, "origin file"),
        (_origin_garbage, "origin file"),
        (_origin_without_reference, "not a container image"),
        (_origin_tag_only, "no digest"),
        (_origin_unknown_transport, "transport"),
        (_link_loop, "too many levels of symbolic links"),
        (_link_escape, "outside the host root"),
    ],
)
async def test_unreadable_booted_image_abstains_says_so_and_counts(
    api: SimApiServer,
    host: HostFS,
    start_agent: StartAgent,
    corrupt: Callable[[HostFS], None],
    fragment: str,
) -> None:
    corrupt(host)
    agent = await start_agent()
    line = await agent.wait_log(lambda r: str(r.get("message", "")).startswith("booted image"))
    assert str(line["message"]).startswith("booted image unknown: "), line
    assert fragment in str(line["message"]), line
    assert "\n" not in str(line["message"])
    # The seed's same-image update (desiredImage is the image this node booted): not held.
    drain = f"drain-{CONFIG_B}"
    start = len(agent.records)
    since = mcd_request(api, drain, **{protocol.DESIRED_IMAGE: IMAGE_A})
    record = await agent.wait_log(
        lambda r: r.get("message") == "decision" and r.get("request") == drain, start
    )
    assert record["outcome"] == "pass", record
    assert not [w for w in agent_writes(api, since) if w.resource == "nodes"]
    assert await metric(agent, "drain_guard_invalid_input_total", kind="host_file") == 1
    assert await metric(agent, "drain_guard_image_match") == -1
    assert agent.proc.returncode is None
