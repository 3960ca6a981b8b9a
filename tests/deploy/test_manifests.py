"""Every overlay renders, and every rendered object is valid.

Objects of built-in kinds are validated against the Kubernetes OpenAPI schemas shipped by
``kubernetes-validate`` (strict: unknown fields are errors), for the oldest release each
overlay supports (1.30 where the admission policy is included; 1.28 for OpenShift 4.15) and
for the newest the package knows. Custom resources (ServiceMonitor, PrometheusRule,
OpenShift's SecurityContextConstraints) have no schema there; they are checked structurally
below, and a test pins which kinds those are, so that a built-in kind never escapes schema
validation by a misspelt apiVersion.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import kubernetes_validate
import pytest

from drain_guard.confine.permissions import EVENTS_NAMESPACE, INSTALL_MODES, MCO_NAMESPACES
from drain_guard.confine.rights import fitting_overlay
from tests.deploy.tools import (
    CLUSTER_SCOPED,
    DAEMONSET_DIR,
    MIN_KUBERNETES,
    OVERLAYS,
    WITH_ADMISSION_POLICY,
    Obj,
    key,
    one,
    pod_spec,
)

LATEST = kubernetes_validate.latest_version()

# Kinds without a schema in kubernetes-validate, per overlay: checked structurally instead.
_OPENSHIFT_CUSTOM_KINDS = {
    "monitoring.coreos.com/v1 ServiceMonitor",
    "monitoring.coreos.com/v1 PrometheusRule",
    "security.openshift.io/v1 SecurityContextConstraints",
}
CUSTOM_KINDS = {
    "openshift": _OPENSHIFT_CUSTOM_KINDS,
    "openshift-4.15": _OPENSHIFT_CUSTOM_KINDS,
    # Applies on a bare cluster: nothing that needs a CRD.
    "kubernetes": set(),
}
NAMESPACE = "drain-guard"


def _type(obj: Obj) -> str:
    return f"{obj['apiVersion']} {obj['kind']}"


#: The overlays that are no install mode of their own: the cluster side of the systemd
#: install on OpenShift 4.15/4.16 (the central shield behind the webhook), beside its nodes'.
CLUSTER_SIDES = {"systemd-4.15"}


def test_every_overlay_is_an_install_mode_the_tests_know() -> None:
    """A new overlay is an ``InstallMode`` of ``confine.permissions.INSTALL_MODES`` (its grants,
    its ``--install``), one of the overlays these tests render when it runs a DaemonSet, and,
    when a cluster fits it, what ``drain-guard preflight`` picks (docs/architecture.md, "An
    install mode")."""
    overlays = {p.name for p in (DAEMONSET_DIR / "overlays").iterdir() if p.is_dir()}
    assert overlays == set(INSTALL_MODES) | CLUSTER_SIDES
    daemonsets = {mode.name for mode in INSTALL_MODES.values() if mode.service_account}
    assert set(OVERLAYS) == daemonsets
    fitting = {
        fitting_overlay(minor, openshift)[0] for minor in (28, 30) for openshift in (None, "4")
    }
    assert fitting - {None} <= daemonsets


def test_overlay_renders_the_whole_deployment(objects: list[Obj], overlay: str) -> None:
    kinds = {o["kind"] for o in objects}
    policy_kinds = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    if overlay in WITH_ADMISSION_POLICY:
        assert policy_kinds <= kinds
    else:
        assert not policy_kinds & kinds
    assert {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "DaemonSet",
        "Service",
    } <= kinds
    monitoring = {"ServiceMonitor", "PrometheusRule"}
    if overlay == "kubernetes":
        assert not monitoring & kinds
    else:
        assert monitoring <= kinds
    keys = [key(o) for o in objects]
    assert len(keys) == len(set(keys)), "duplicate objects"


@pytest.mark.parametrize("variant", ["openshift", "openshift-4.15"])
def test_openshift_overlay_adds_its_pieces(
    rendered: Callable[[str], list[Obj]], variant: str
) -> None:
    objects = rendered(variant)
    one(objects, "SecurityContextConstraints", "drain-guard")
    labels = one(objects, "Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["openshift.io/cluster-monitoring"] == "true"
    names = [c["name"] for c in pod_spec(objects)["containers"]]
    assert names == ["drain-guard", "kube-rbac-proxy"]


@pytest.mark.parametrize("newest", [False, True], ids=["oldest", "newest"])
def test_builtin_objects_validate_against_kubernetes_schemas(
    objects: list[Obj], overlay: str, newest: bool
) -> None:
    version = LATEST if newest else MIN_KUBERNETES[overlay]
    without_schema = set()
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            without_schema.add(_type(obj))
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{key(obj)} is invalid for Kubernetes {version}: {exc.message}")
    assert without_schema <= CUSTOM_KINDS[overlay]


def test_validation_catches_an_invalid_object(objects: list[Obj], overlay: str) -> None:
    """The schema check has teeth: a misplaced field in the DaemonSet is reported."""
    daemonset = one(objects, "DaemonSet", "drain-guard")
    daemonset["spec"]["template"]["spec"]["containers"][0]["readOnly"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, MIN_KUBERNETES[overlay], strict=True)


def test_namespaces_are_set_where_they_belong(objects: list[Obj]) -> None:
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert namespace is None, f"{key(obj)} is cluster-scoped"
        elif obj["kind"] in ("Role", "RoleBinding") and obj["metadata"]["name"] in (
            "drain-guard-shield",
            "drain-guard-central-shield",
            "drain-guard-webhook-build-pods",
        ):
            # The shields' rights live where build pods run (drain_guard.confine.permissions).
            assert namespace in MCO_NAMESPACES, f"{key(obj)} is not where build pods run"
        elif obj["metadata"]["name"] == "drain-guard-events":
            # Events about a Node live in `default`
            # (drain_guard.confine.permissions.EVENTS_NAMESPACE).
            assert obj["kind"] == "RoleBinding", key(obj)
            assert namespace == EVENTS_NAMESPACE, key(obj)
        else:
            assert namespace == NAMESPACE, f"{key(obj)} is not in {NAMESPACE}"


def test_kubernetes_overlay_applies_on_a_bare_cluster(
    rendered: Callable[[str], list[Obj]],
) -> None:
    """Every namespaced object goes into a namespace the overlay creates or every cluster has
    (kubectl apply -k fails on a missing one), and no kind needs a CRD (checked by the
    schema test: CUSTOM_KINDS["kubernetes"] is empty)."""
    objects = rendered("kubernetes")
    created = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    used = {o["metadata"]["namespace"] for o in objects if "namespace" in o["metadata"]}
    assert used <= created | {"default"}, used - created
    assert set(MCO_NAMESPACES) <= created


@pytest.mark.parametrize("overlay", ["openshift", "openshift-4.15"])
def test_service_monitor_scrapes_the_metrics_service(objects: list[Obj]) -> None:
    monitor = one(objects, "ServiceMonitor", "drain-guard")
    service = one(objects, "Service", "drain-guard-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    port_names = {p["name"] for p in service["spec"]["ports"]}
    endpoints = monitor["spec"]["endpoints"]
    assert endpoints, "no endpoints"
    for endpoint in endpoints:
        assert endpoint["port"] in port_names
        assert endpoint["path"] == "/metrics"
        assert endpoint["scheme"] in {"http", "https"}
        assert re.fullmatch(r"\d+[smh]", endpoint["interval"])
        for relabel in endpoint.get("relabelings", []):
            assert relabel["action"] in {"replace", "keep", "drop", "labelmap"}
    # The Service selects the DaemonSet's pods and targets a port the pods declare.
    template = one(objects, "DaemonSet", "drain-guard")["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    pod_ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= pod_ports


@pytest.mark.parametrize("overlay", ["openshift", "openshift-4.15"])
def test_prometheus_rule_is_well_formed(objects: list[Obj]) -> None:
    rules = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert rules
    for rule_object in rules:
        groups = rule_object["spec"]["groups"]
        assert groups
        for group in groups:
            assert group["name"]
            for rule in group["rules"]:
                assert isinstance(rule["expr"], str | int)
                assert ("alert" in rule) != ("record" in rule)
                if "alert" in rule:
                    assert {"summary", "description", "runbook_url"} <= rule["annotations"].keys()
                    assert rule["labels"]["severity"] in {"critical", "warning", "info"}


def test_security_context_constraints_admit_only_what_the_pod_needs(
    rendered: Callable[[str], list[Obj]],
) -> None:
    """The openshift-4.15 overlay reuses the openshift one, so checking one covers both."""
    objects = rendered("openshift")
    scc = one(objects, "SecurityContextConstraints", "drain-guard")
    for flag in (
        "allowPrivilegedContainer",
        "allowPrivilegeEscalation",
        "allowHostNetwork",
        "allowHostPID",
        "allowHostIPC",
        "allowHostPorts",
    ):
        assert scc[flag] is False, flag
    assert scc["allowHostDirVolumePlugin"] is True
    assert scc["readOnlyRootFilesystem"] is True
    assert scc["requiredDropCapabilities"] == ["ALL"]
    assert not scc["allowedCapabilities"]
    assert scc["runAsUser"]["type"] in {"MustRunAsNonRoot", "MustRunAs"}
    assert scc["seccompProfiles"] == ["runtime/default"]
    # Every volume type the pod uses is allowed, and nothing more than it uses (plus the
    # projected service-account token volume that Kubernetes adds).
    spec = pod_spec(objects)
    used = {next(k for k in volume if k != "name") for volume in spec["volumes"]}
    assert set(scc["volumes"]) == used | {"projected"}
    annotations = one(objects, "DaemonSet", "drain-guard")["spec"]["template"]["metadata"]
    assert annotations["annotations"]["openshift.io/required-scc"] == "drain-guard"
