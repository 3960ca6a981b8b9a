"""The central shield's manifests (``daemonset/components/central-shield``), rendered with
``kubectl kustomize`` in ``daemonset/overlays/systemd`` (the central shield alone, as the
systemd install applies it; no overlay includes it any more), read the way the API server,
the scheduler and the kubelet read them. Its kube-rbac-proxy sidecar is the agents'
(``tests/deploy/test_kube_rbac_proxy.py`` checks both)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import kubernetes_validate
import pytest

from drain_guard.confine.permissions import (
    INSTALL_MODES,
    MCO_NAMESPACES,
    SHIELD_PERMISSIONS,
    Scope,
    service_account_grants,
)
from drain_guard.settings.shield import ShieldSettings, add_shield_arguments, shield_settings_from
from tests.deploy.rbac import Grant, granted
from tests.deploy.tools import (
    MIN_KUBERNETES,
    OVERLAYS,
    Obj,
    check_served_through_the_proxy,
    container,
    container_env,
    expand_args,
    one,
    render,
)

ACCOUNT = ("drain-guard", "drain-guard-shield")
LATEST = kubernetes_validate.latest_version()
CUSTOM_KINDS = {"monitoring.coreos.com/v1 ServiceMonitor"}


@pytest.fixture(scope="module")
def alone() -> list[Obj]:
    """The central shield alone, as ``oc apply -k daemonset/overlays/systemd`` renders it."""
    return render("systemd")


@pytest.fixture
def objects(alone: list[Obj]) -> list[Obj]:
    """Where the central shield is installed: with the systemd install only (OpenShift
    4.15/4.16's agents keep their own budgets, confined by the admission webhook)."""
    return alone


def deployment(objects: list[Obj]) -> Obj:
    return one(objects, "Deployment", "drain-guard-shield")


def pod(objects: list[Obj]) -> Obj:
    spec: Obj = deployment(objects)["spec"]["template"]["spec"]
    return spec


def shield_container(objects: list[Obj]) -> Obj:
    return container(objects, "drain-guard-shield", deployment(objects))


def shield_settings(objects: list[Obj]) -> ShieldSettings:
    return shield_settings_in(objects, "drain-guard")


def shield_settings_in(objects: list[Obj], namespace: str) -> ShieldSettings:
    """The container's args and environment (its pod in ``namespace``), parsed by the
    shield's own settings code."""
    box = shield_container(objects)
    env = container_env(box, namespace)
    args = [expand_args(a, env) for a in box["args"]]
    assert args[0] == "shield"
    parser = argparse.ArgumentParser()
    add_shield_arguments(parser)
    return shield_settings_from(parser.parse_args(args[1:]), env)


@pytest.mark.parametrize("newest", [False, True], ids=["oldest", "newest"])
def test_the_component_validates_against_kubernetes_schemas(alone: list[Obj], newest: bool) -> None:
    """The shield on OpenShift 4.15's Kubernetes; its admission policy on 1.30's, the first
    that serves it (install.md says what 4.15/4.16 leave out)."""
    without_schema = set()
    for obj in alone:
        policy = obj["kind"].startswith("ValidatingAdmissionPolicy")
        oldest = MIN_KUBERNETES["openshift" if policy else "openshift-4.15"]
        try:
            kubernetes_validate.validate(obj, LATEST if newest else oldest, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            without_schema.add(f"{obj['apiVersion']} {obj['kind']}")
    assert without_schema == CUSTOM_KINDS


def test_no_overlay_runs_it_every_agent_keeps_its_budgets(
    rendered: Callable[[str], list[Obj]],
) -> None:
    for overlay in OVERLAYS:
        names = [o["metadata"]["name"] for o in rendered(overlay) if o["kind"] == "Deployment"]
        assert "drain-guard-shield" not in names, overlay
        assert INSTALL_MODES[overlay].shield, overlay


def test_no_install_mode_lets_an_agent_write_budgets_unconfined(
    rendered: Callable[[str], list[Obj]],
) -> None:
    """Issue 11 finding 3: an agent's account may write budgets only where the admission
    policy drain-guard-budget-confinement, or the admission webhook (OpenShift 4.15/4.16),
    confines it to its own node's."""
    for overlay in OVERLAYS:
        objects = rendered(overlay)
        writes = {
            g
            for g in granted(objects)
            if g.resource == "poddisruptionbudgets" and g.verb not in ("get", "list", "watch")
        }
        policies = {
            o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
        }
        webhooks = {
            w["name"]
            for o in objects
            if o["kind"] == "ValidatingWebhookConfiguration"
            for w in o["webhooks"]
            if any("poddisruptionbudgets" in rule["resources"] for rule in w["rules"])
        }
        confined = "drain-guard-budget-confinement" in policies or webhooks == {
            "agents.drain-guard.io"
        }
        assert not writes or confined, overlay
    assert not [p for p in service_account_grants(INSTALL_MODES["systemd"]) if p.shield]


def test_its_account_is_granted_exactly_the_shields_calls(objects: list[Obj]) -> None:
    ref = shield_settings(objects).deployment
    assert ref is not None
    assert (ref.namespace, ref.name) == ("drain-guard", "drain-guard-shield")
    wanted = set()
    for p in SHIELD_PERMISSIONS:
        for verb in p.verbs:
            if p.scope is Scope.MCO:
                wanted |= {Grant(p.api_group, p.resource, verb, ns, ()) for ns in MCO_NAMESPACES}
            elif p.scope is Scope.CLUSTER:
                wanted.add(Grant(p.api_group, p.resource, verb, "", ()))
            else:
                assert p.scope is Scope.OWN_WORKLOAD
                wanted.add(Grant(p.api_group, p.resource, verb, ref.namespace, (ref.name,)))
    actual = granted(objects, ACCOUNT)
    assert actual == wanted, sorted(actual ^ wanted)
    # Cluster-wide only its proxy's reviews of scrapers: no Node, no Event, no budget outside
    # MCO's namespace.
    assert {(g.resource, g.verb) for g in actual if not g.namespace} == {
        ("tokenreviews", "create"),
        ("subjectaccessreviews", "create"),
    }


def test_the_deployment_runs_one_shield_on_the_control_plane(objects: list[Obj]) -> None:
    deployment = one(objects, "Deployment", "drain-guard-shield")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = pod(objects)
    assert spec["serviceAccountName"] == ACCOUNT[1]
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/master": ""}
    # OpenShift 4.15's masters carry both taints; the pod must tolerate each to schedule.
    master_taints = [
        {"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"},
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
    ]
    for taint in master_taints:
        assert any(
            t.get("key") == taint["key"]
            and t.get("effect") in (None, taint["effect"])
            and t.get("operator") == "Exists"
            for t in spec["tolerations"]
        ), taint
    assert spec["priorityClassName"] == "system-cluster-critical"
    selector = deployment["spec"]["selector"]["matchLabels"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()


def test_the_pod_is_restricted_v2(objects: list[Obj]) -> None:
    """What OpenShift's restricted-v2 SCC admits: non-root with the namespace's UID (so no
    runAsUser of its own), no capabilities, no escalation, RuntimeDefault seccomp, no host
    path, port or namespace."""
    spec = pod(objects)
    annotations = one(objects, "Deployment", "drain-guard-shield")["spec"]["template"]["metadata"]
    assert annotations["annotations"]["openshift.io/required-scc"] == "restricted-v2"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(key)
    # restricted-v2's volume kinds (its shield's scratch, its proxy's certificate and config).
    kinds = {next(k for k in v if k != "name") for v in spec["volumes"]}
    assert kinds <= {"configMap", "downwardAPI", "emptyDir", "projected", "secret"}, kinds
    assert [c["name"] for c in spec["containers"]] == ["drain-guard-shield", "kube-rbac-proxy"]
    for box in spec["containers"]:
        ctx = box["securityContext"]
        assert "runAsUser" not in ctx
        assert "runAsUser" not in spec["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"] == {"drop": ["ALL"]}
        assert all("hostPort" not in p for p in box.get("ports", []))


def test_it_serves_metrics_and_status_only_through_the_proxy(objects: list[Obj]) -> None:
    """As the agents on OpenShift: the shield listens on loopback, kube-rbac-proxy serves its
    /metrics and /status (budget and build-pod names) over TLS to whom its attribute allows,
    and the kubelet's probes reach the shield through it (before: plain HTTP to anyone on the
    pod network)."""
    check_served_through_the_proxy(
        objects,
        deployment(objects),
        shield_container(objects),
        str(shield_settings(objects).reporting.listen),
        service="drain-guard-shield",
        monitor="drain-guard-shield",
    )


def test_prometheus_scrapes_it_as_its_own_job(objects: list[Obj]) -> None:
    """The Service, selected by the shield's ServiceMonitor only, names the job
    ``drain-guard-shield`` (the agents' up alerts leave that job out)."""
    service = one(objects, "Service", "drain-guard-shield")
    (port,) = service["spec"]["ports"]
    monitors = [
        m
        for m in objects
        if m["kind"] == "ServiceMonitor"
        and m["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    ]
    assert [m["metadata"]["name"] for m in monitors] == ["drain-guard-shield"]
    assert [e["port"] for e in monitors[0]["spec"]["endpoints"]] == [port["name"]]
