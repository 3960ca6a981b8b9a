"""The DaemonSet: least privilege, read-only host access, and flags the agent accepts."""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from collections.abc import Callable
from typing import Any

import pytest

from drain_guard.config.values import WorkloadRef
from drain_guard.confine.permissions import INSTALL_MODES
from drain_guard.settings.agent import Settings, add_run_arguments, settings_from
from drain_guard.settings.install import Install, InstallKind
from tests.deploy.tools import (
    ON_OSTREE,
    REPO,
    Obj,
    agent_container,
    check_served_through_the_proxy,
    container_env,
    containers,
    expand_args,
    one,
    pod_spec,
    probe_port,
)

OSTREE = "/sysroot/ostree"  # all the booted-image reader needs (and /proc/cmdline)


def agent_settings(objects: list[Obj]) -> Settings:
    """Parse the container's args and environment with the agent's own settings code."""
    daemonset = one(objects, "DaemonSet", "drain-guard")
    agent = agent_container(objects)
    env = container_env(agent, daemonset["metadata"]["namespace"])
    args = [expand_args(a, env) for a in agent["args"]]
    assert args[0] == "run"
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return settings_from(parser.parse_args(args[1:]), env)


def test_agent_accepts_its_flags_and_environment(objects: list[Obj]) -> None:
    settings = agent_settings(objects)
    assert settings.node_name == "worker-0"
    # The start-up check needs the pod's name.
    ref = WorkloadRef("drain-guard", "drain-guard")
    assert settings.install == Install(InstallKind.DAEMONSET, ref, "drain-guard-x7k2p")


def test_node_name_comes_from_the_downward_api(objects: list[Obj]) -> None:
    env = {v["name"]: v for v in agent_container(objects)["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_pod_runs_non_root_with_runtime_default_seccomp(objects: list[Obj]) -> None:
    """Every overlay's pod, the agent's UID and group."""
    spec = pod_spec(objects)
    context = spec["securityContext"]
    assert context["runAsNonRoot"] is True
    assert (context["runAsUser"], context["runAsGroup"]) == (65532, 65532)
    assert context["seccompProfile"]["type"] == "RuntimeDefault"
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(flag), flag


def test_every_container_is_locked_down(objects: list[Obj], overlay: str) -> None:
    pod_user = pod_spec(objects)["securityContext"]["runAsUser"]
    for c in containers(objects):
        context = c["securityContext"]
        name = c["name"]
        assert context["allowPrivilegeEscalation"] is False, name
        assert context["readOnlyRootFilesystem"] is True, name
        assert context["capabilities"] == {"drop": ["ALL"]}, name
        assert not context.get("privileged"), name
        assert context["runAsNonRoot"] is True, name
        assert context.get("runAsUser", pod_user) == 65532, name
        assert all("hostPort" not in p for p in c.get("ports", [])), name


def test_host_paths_are_only_what_the_agent_reads_and_read_only(
    objects: list[Obj], overlay: str
) -> None:
    spec = pod_spec(objects)
    host_volumes = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    # No overlay mounts the kubelet's credentials: the one host path is the ostree directory,
    # and the kubernetes overlay's nodes have none (it mounts nothing of the host).
    expected = {OSTREE: "Directory"} if overlay in ON_OSTREE else {}
    assert {v["path"]: v["type"] for v in host_volumes.values()} == expected
    mounts = [
        m
        for c in containers(objects)
        for m in c.get("volumeMounts", [])
        if m["name"] in host_volumes
    ]
    assert bool(mounts) == bool(expected), "the host volume is not mounted"
    for mount in mounts:
        assert mount["readOnly"] is True, mount
        assert mount.get("mountPropagation", "None") == "None", mount
    # Every mount, host or not, is read-only except the scratch emptyDir.
    scratch = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    for c in containers(objects):
        for mount in c.get("volumeMounts", []):
            assert mount.get("readOnly") is True or mount["name"] in scratch, mount


def test_runs_on_every_node_and_updates_one_at_a_time(objects: list[Obj]) -> None:
    daemonset = one(objects, "DaemonSet", "drain-guard")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert "nodeSelector" not in spec
    assert "affinity" not in spec
    assert spec["priorityClassName"] == "system-node-critical"
    assert daemonset["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= (
        daemonset["spec"]["template"]["metadata"]["labels"].items()
    )


def test_resources_are_bounded(objects: list[Obj]) -> None:
    for c in containers(objects):
        resources: dict[str, Any] = c["resources"]
        assert {"cpu", "memory"} <= resources["requests"].keys(), c["name"]
        assert "memory" in resources["limits"], c["name"]
    agent = agent_container(objects)["resources"]
    # The request follows the agent's measured resident memory at rest as deployed (the
    # committed footprint result, docs/benchmarks.md): at least that, at most half again as
    # much; the limit leaves room above it.
    footprint = json.loads((REPO / "benchmarks" / "results" / "footprint.json").read_text())
    assert footprint["params"]["variant"] == "deployed"
    measured = footprint["rest_median"]["deployed"]["rss_mib"]
    request = _mebibytes(agent["requests"]["memory"])
    assert measured <= request <= 1.5 * measured
    assert _mebibytes(agent["limits"]["memory"]) >= 1.5 * request


def _mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0}
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", quantity)
    assert match, f"unexpected memory quantity {quantity}"
    return int(match.group(1)) * units[match.group(2)]


def test_probe_port_resolution_is_the_kubelets() -> None:
    """A name declared only by another container of the pod does not resolve."""
    agent: Obj = {"name": "drain-guard"}
    assert probe_port(agent, 8443) == 8443
    assert probe_port({"name": "a", "ports": [{"name": "m", "containerPort": 9}]}, "m") == 9
    with pytest.raises(AssertionError, match="declares no port named 'https'"):
        probe_port(agent, "https")


def test_probes_reach_the_agent(rendered: Callable[[str], list[Obj]]) -> None:
    """Plain Kubernetes: the kubelet probes the agent's own listener on the pod IP."""
    objects = rendered("kubernetes")
    agent = agent_container(objects)
    settings = agent_settings(objects)
    assert settings.reporting.listen.host == "0.0.0.0"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = agent[probe]["httpGet"]
        assert get["path"] == path
        assert probe_port(agent, get["port"]) == settings.reporting.listen.port
        assert get.get("scheme", "HTTP") == "HTTP"


@pytest.mark.parametrize("overlay", ["openshift", "openshift-4.15"])
def test_openshift_serves_metrics_only_through_the_proxy(
    rendered: Callable[[str], list[Obj]], overlay: str
) -> None:
    """OpenShift: the agent listens on loopback; kube-rbac-proxy serves TLS and lets only the
    kubelet's probe paths through unauthenticated."""
    objects = rendered(overlay)
    check_served_through_the_proxy(
        objects,
        one(objects, "DaemonSet", "drain-guard"),
        agent_container(objects),
        str(agent_settings(objects).reporting.listen),
        service="drain-guard-metrics",
        monitor="drain-guard",
    )


def test_image_tag_is_the_project_version(objects: list[Obj]) -> None:
    """Every container of the project's image (the 4.15 webhook's too, added after the
    base's images: transformer ran), in every workload."""
    with (REPO / "pyproject.toml").open("rb") as f:
        version = tomllib.load(f)["project"]["version"]
    images = [
        c["image"]
        for workload in objects
        if workload["kind"] in {"DaemonSet", "Deployment"}
        for c in containers(objects, workload)
        if c["image"].partition(":")[0] == "drain-guard"
    ]
    assert agent_container(objects)["image"] in images
    assert {image.rsplit(":", 1)[1] for image in images} == {version}


def test_4_15_runs_under_the_same_scc_as_4_17(rendered: Callable[[str], list[Obj]]) -> None:
    """MustRunAs 65532, as the openshift overlay's: no container of the pod runs as root
    (the kubelet-credential copiers are gone), and nothing but the agent, its proxy and the
    booted-origin copy (tests/deploy/test_host_view.py) runs."""
    objects = rendered("openshift-4.15")
    constraints = one(objects, "SecurityContextConstraints", "drain-guard")
    assert constraints == one(rendered("openshift"), "SecurityContextConstraints", "drain-guard")
    assert constraints["runAsUser"] == {"type": "MustRunAs", "uid": 65532}
    pod_user = pod_spec(objects)["securityContext"]["runAsUser"]
    users = {
        c["name"]: c["securityContext"].get("runAsUser", pod_user) for c in containers(objects)
    }
    assert users == {"drain-guard": 65532, "kube-rbac-proxy": 65532, "booted-origin": 65532}
    assert [c["name"] for c in pod_spec(objects)["initContainers"]] == ["booted-origin"]


@pytest.mark.parametrize(
    "overlay", sorted(m.name for m in INSTALL_MODES.values() if m.name != "systemd")
)
def test_each_overlays_agent_runs_as_its_install_mode_says(
    rendered: Callable[[str], list[Obj]], overlay: str
) -> None:
    """confine.permissions.INSTALL_MODES names the ``--install`` each install's agents run
    with; the overlay's DaemonSet, parsed by the agent's settings, is that install."""
    settings = agent_settings(rendered(overlay))
    assert settings.install.kind is InstallKind(INSTALL_MODES[overlay].install)
