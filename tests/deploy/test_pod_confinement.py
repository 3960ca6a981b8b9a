"""The agent's pod, confined twice: by its SCC (OpenShift) and by drain-guard-pod-confinement.

An SCC cannot restrict host paths (``allowHostDirVolumePlugin`` is all or nothing), so the
admission policy, evaluated here with the CEL interpreter of tests/deploy/admission.py, does:
the rendered DaemonSet's pod, as the API server hands it to validating admission (service
account token volume added, and on OpenShift the SCC's defaults applied), is admitted; every
way to reach more of the host with the same service account is denied.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from drain_guard.confine import admission
from tests.deploy.admission import Policy, Verdict, admitted_pod, scc
from tests.deploy.tools import OVERLAYS, WITH_ADMISSION_POLICY, Obj, one, pod_spec

POD_POLICY = "drain-guard-pod-confinement"
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
UID = 65532


@pytest.fixture(scope="module")
def pods(rendered: Callable[[str], list[Obj]]) -> Policy:
    """The base's policy, as the openshift overlay renders it: its pod mounts the host path
    that the ways past the policy below change (the kubernetes overlay's mounts none)."""
    return Policy(one(rendered("openshift"), "ValidatingAdmissionPolicy", POD_POLICY))


def create(policy: Policy, pod: Obj) -> Verdict:
    return policy.review(DAEMONSET_CONTROLLER, None, None, pod, operation="CREATE")


# --- the SCC -------------------------------------------------------------------------------


def test_scc_pins_the_images_user_and_groups(rendered: Callable[[str], list[Obj]]) -> None:
    """MustRunAs the UID the pod (and so the Dockerfile's USER, test_dockerfile) runs as, and
    no other group: group 0 through fsGroup or supplementalGroups would read root-group files."""
    objects = rendered("openshift")
    constraints = scc(objects)
    security = pod_spec(objects)["securityContext"]
    assert security["runAsUser"] == UID
    assert constraints["runAsUser"] == {"type": "MustRunAs", "uid": security["runAsUser"]}
    for strategy in ("fsGroup", "supplementalGroups"):
        assert constraints[strategy] == {
            "type": "MustRunAs",
            "ranges": [{"min": security["runAsGroup"], "max": security["runAsGroup"]}],
        }, strategy
    # No container overrides the pod's user with one the SCC would refuse.
    spec = pod_spec(objects)
    for container in [*spec["containers"], *spec.get("initContainers", [])]:
        assert container["securityContext"].get("runAsUser", UID) == UID, container["name"]


def test_scc_allows_the_volume_kinds_the_admitted_pod_has_and_no_more(
    rendered: Callable[[str], list[Obj]],
) -> None:
    objects = rendered("openshift")
    kinds = {next(k for k in v if k != "name") for v in admitted_pod(objects)["spec"]["volumes"]}
    assert set(scc(objects)["volumes"]) == kinds


# --- the admission policy: what the DaemonSet creates is admitted ---------------------------


@pytest.mark.parametrize("overlay", WITH_ADMISSION_POLICY)
def test_the_daemonsets_pod_is_admitted(rendered: Callable[[str], list[Obj]], overlay: str) -> None:
    objects = rendered(overlay)
    policy = Policy(one(objects, "ValidatingAdmissionPolicy", POD_POLICY))
    verdict = create(policy, admitted_pod(objects))
    assert verdict.applies
    assert verdict.admitted, verdict.denied


def test_the_policy_is_bound_and_left_out_before_kubernetes_1_30(
    rendered: Callable[[str], list[Obj]],
) -> None:
    for overlay in WITH_ADMISSION_POLICY:
        binding = one(rendered(overlay), "ValidatingAdmissionPolicyBinding", POD_POLICY)
        assert binding["spec"] == {"policyName": POD_POLICY, "validationActions": ["Deny"]}
    assert not [o for o in rendered("openshift-4.15") if o["metadata"]["name"] == POD_POLICY]


def test_pods_of_the_account_are_matched_in_any_namespace(
    rendered: Callable[[str], list[Obj]], pods: Policy
) -> None:
    objects = rendered("openshift")
    pod = admitted_pod(objects, namespace="other-ns")
    pod["spec"]["volumes"][0]["hostPath"]["path"] = "/"
    verdict = create(pods, pod)
    assert verdict.applies
    assert not verdict.admitted


def test_pods_of_other_accounts_are_not_affected(
    rendered: Callable[[str], list[Obj]], pods: Policy
) -> None:
    pod = admitted_pod(rendered("openshift"))
    pod["spec"]["serviceAccountName"] = "machine-config-daemon"
    pod["spec"]["hostPID"] = True
    assert not create(pods, pod).applies


# --- ... and every way past it is denied -----------------------------------------------------


def _host_volume(pod: Obj) -> Obj:
    volumes: list[Obj] = [v for v in pod["spec"]["volumes"] if "hostPath" in v]
    (volume,) = volumes
    return volume


def _host_mount(container: Obj, pod: Obj) -> Obj:
    name = _host_volume(pod)["name"]
    mounts: list[Obj] = [m for m in container["volumeMounts"] if m["name"] == name]
    (mount,) = mounts
    return mount


def _reader(pod: Obj) -> Obj:
    """The one container that mounts the host path: the init container booted-origin."""
    found: list[Obj] = [c for c in pod["spec"]["initContainers"] if c["name"] == "booted-origin"]
    (container,) = found
    return container


def _agent(pod: Obj) -> Obj:
    container: Obj = pod["spec"]["containers"][0]
    return container


def _add_host_path(pod: Obj, path: str) -> None:
    pod["spec"]["volumes"].append({"name": "kubelet", "hostPath": {"path": path}})
    _agent(pod)["volumeMounts"].append(
        {"name": "kubelet", "mountPath": "/host/kubelet", "readOnly": True}
    )


def _debug_container(**changes: Any) -> Obj:
    """A container that mounts the host path as the agent does, with ``changes``."""
    return {
        "name": "debug",
        "image": "registry.example.com/tools:1",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "host-ostree", "mountPath": "/host/ostree", **changes}],
    }


DENIED: dict[str, tuple[Callable[[Obj], object], str]] = {
    "host root": (
        lambda p: _host_volume(p)["hostPath"].update(path="/"),
        "one host path, /sysroot/ostree",
    ),
    "trailing slash": (
        lambda p: _host_volume(p)["hostPath"].update(path="/sysroot/ostree/"),
        "one host path",
    ),
    "a second host path": (lambda p: _add_host_path(p, "/var/lib/kubelet"), "one host path"),
    "DirectoryOrCreate": (
        lambda p: _host_volume(p)["hostPath"].update(type="DirectoryOrCreate"),
        "of type Directory",
    ),
    "no type": (lambda p: _host_volume(p)["hostPath"].pop("type"), "of type Directory"),
    "writable mount": (lambda p: _host_mount(_reader(p), p).update(readOnly=False), "read-only"),
    "mount without readOnly": (lambda p: _host_mount(_reader(p), p).pop("readOnly"), "read-only"),
    "subPath": (lambda p: _host_mount(_reader(p), p).update(subPath="deploy"), "no subPath"),
    "subPathExpr": (
        lambda p: _host_mount(_reader(p), p).update(subPathExpr="$(NODE_NAME)"),
        "no subPath",
    ),
    "bidirectional propagation": (
        lambda p: _host_mount(_reader(p), p).update(mountPropagation="Bidirectional"),
        "mount propagation",
    ),
    "writable mount in an init container": (
        lambda p: p["spec"].setdefault("initContainers", []).append(_debug_container()),
        "read-only",
    ),
    "hostNetwork": (lambda p: p["spec"].update(hostNetwork=True), "host's network"),
    "hostPID": (lambda p: p["spec"].update(hostPID=True), "host's network, PID"),
    "hostIPC": (lambda p: p["spec"].update(hostIPC=True), "host's network, PID or IPC"),
    "hostPort": (
        lambda p: _agent(p).setdefault("ports", []).append({"containerPort": 22, "hostPort": 22}),
        "host ports",
    ),
    "csi volume": (
        lambda p: p["spec"]["volumes"].append({"name": "x", "csi": {"driver": "x.example.com"}}),
        "volumes only",
    ),
    "privileged": (lambda p: _agent(p)["securityContext"].update(privileged=True), "unprivileged"),
    "privilege escalation": (
        lambda p: _agent(p)["securityContext"].update(allowPrivilegeEscalation=True),
        "allowPrivilegeEscalation: false",
    ),
    "no container securityContext": (lambda p: _agent(p).pop("securityContext"), "unprivileged"),
    "unmasked /proc": (
        lambda p: _agent(p)["securityContext"].update(procMount="Unmasked"),
        "unprivileged",
    ),
    "added capability": (
        lambda p: _agent(p)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        "drop ALL capabilities and add none",
    ),
    "capabilities kept": (
        lambda p: _agent(p)["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
        "drop ALL",
    ),
    "root pod": (lambda p: p["spec"]["securityContext"].update(runAsUser=0), "UID and GID 65532"),
    "root container": (
        lambda p: _agent(p)["securityContext"].update(runAsUser=0),
        "UID and GID 65532",
    ),
    "no user at all": (
        lambda p: p["spec"]["securityContext"].pop("runAsUser"),
        "UID and GID 65532",
    ),
    "root group": (
        lambda p: _agent(p)["securityContext"].update(runAsGroup=0),
        "UID and GID 65532",
    ),
    "fsGroup 0": (lambda p: p["spec"]["securityContext"].update(fsGroup=0), "no group but 65532"),
    "supplemental group 0": (
        lambda p: p["spec"]["securityContext"].update(supplementalGroups=[65532, 0]),
        "no group but 65532",
    ),
    "seccomp unconfined": (
        lambda p: _agent(p)["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "RuntimeDefault",
    ),
    "no seccomp profile": (
        lambda p: p["spec"]["securityContext"].pop("seccompProfile"),
        "RuntimeDefault",
    ),
    "spc_t": (
        lambda p: _agent(p)["securityContext"].update(seLinuxOptions={"type": "spc_t"}),
        "SELinux type",
    ),
    "pod SELinux user": (
        lambda p: p["spec"]["securityContext"].update(seLinuxOptions={"user": "system_u"}),
        "SELinux type, user",
    ),
    "sysctl": (
        lambda p: p["spec"]["securityContext"].update(
            sysctls=[{"name": "kernel.msgmax", "value": "1"}]
        ),
        "sysctls",
    ),
}


@pytest.mark.parametrize("change", sorted(DENIED))
def test_pod_is_denied(rendered: Callable[[str], list[Obj]], pods: Policy, change: str) -> None:
    mutate, reason = DENIED[change]
    pod = admitted_pod(rendered("openshift"))
    mutate(pod)
    verdict = create(pods, pod)
    assert verdict.applies
    assert reason in " ".join(verdict.denied), verdict.denied


def test_an_ephemeral_container_may_not_mount_the_host_path_writable(
    rendered: Callable[[str], list[Obj]], pods: Policy
) -> None:
    """``kubectl debug`` adds ephemeral containers by an UPDATE of pods/ephemeralcontainers,
    whose object is the whole Pod: a debug container may read the host path, not write it."""
    before = admitted_pod(rendered("openshift"))
    reader = copy.deepcopy(before)
    reader["spec"]["ephemeralContainers"] = [_debug_container(readOnly=True)]
    reader["spec"]["ephemeralContainers"][0]["securityContext"]["runAsUser"] = UID
    reader["spec"]["ephemeralContainers"][0]["securityContext"]["runAsGroup"] = UID
    verdict = pods.review("kube:admin", None, before, reader, operation="UPDATE")
    assert verdict.applies
    assert verdict.admitted, verdict.denied
    writer = copy.deepcopy(reader)
    writer["spec"]["ephemeralContainers"][0]["volumeMounts"][0]["readOnly"] = False
    verdict = pods.review("kube:admin", None, before, writer, operation="UPDATE")
    assert "read-only" in " ".join(verdict.denied), verdict.denied


def test_the_policy_matches_pod_creation_and_ephemeral_containers_only(
    rendered: Callable[[str], list[Obj]],
) -> None:
    """Pod specs are immutable but for images and ephemeral containers, so CREATE and the
    ephemeralcontainers subresource are all there is to check; nothing else is slowed down."""
    policy = one(rendered("openshift"), "ValidatingAdmissionPolicy", POD_POLICY)
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert sorted((r["resources"][0], r["operations"][0]) for r in rules) == [
        ("pods", "CREATE"),
        ("pods/ephemeralcontainers", "UPDATE"),
    ]


# --- the webhook of OpenShift 4.15/4.16 (drain_guard.confine.admission) decides the same --------


def webhook_create(pod: Obj) -> admission.Verdict:
    request = {
        "operation": "CREATE",
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": pod["metadata"]["namespace"],
        "userInfo": {"username": DAEMONSET_CONTROLLER},
        "object": pod,
    }
    return admission.decide(request, {})


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_webhook_admits_the_daemonsets_pod(
    rendered: Callable[[str], list[Obj]], overlay: str
) -> None:
    verdict = webhook_create(admitted_pod(rendered(overlay)))
    assert verdict.allowed, verdict.message


@pytest.mark.parametrize("change", sorted(DENIED))
def test_the_webhook_denies_the_pod_too(rendered: Callable[[str], list[Obj]], change: str) -> None:
    mutate, reason = DENIED[change]
    pod = admitted_pod(rendered("openshift"))
    mutate(pod)
    verdict = webhook_create(pod)
    assert not verdict.allowed
    assert reason in verdict.message, verdict.message


def test_the_webhook_leaves_pods_of_other_accounts_alone(
    rendered: Callable[[str], list[Obj]],
) -> None:
    pod = admitted_pod(rendered("openshift"))
    pod["spec"]["serviceAccountName"] = "machine-config-daemon"
    pod["spec"]["hostPID"] = True
    assert webhook_create(pod).allowed
    # An account that only ends like the agents' is not theirs (issue 34: a renamed install's
    # webhook is told its account, --agent-account); theirs is checked.
    pod["spec"]["serviceAccountName"] = "acme-drain-guard"
    assert webhook_create(pod).allowed
    pod["spec"]["serviceAccountName"] = "drain-guard"
    assert not webhook_create(pod).allowed
