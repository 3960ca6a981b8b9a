"""The admission webhook of the openshift-4.15 overlay, as the API server, the scheduler and
the kubelet read it: which requests reach it (its matchConditions, evaluated with cel-python),
what happens when it cannot answer (one entry only, for the release of a hold, fails open),
where the API server finds it (Service, port, certificate), how it is kept up (two replicas
on two control-plane nodes, a budget) and what its own account may do (read pods)."""

from __future__ import annotations

import argparse
import copy
import re
from collections.abc import Callable
from pathlib import Path

import jsonpatch
import pytest
import yaml

from drain_guard import protocol
from drain_guard.confine import admission
from drain_guard.confine.permissions import MCO_NAMESPACES, WEBHOOK_PERMISSIONS, Scope
from drain_guard.kube.client import ADMISSION_TIMEOUT
from drain_guard.settings.webhook import add_webhook_arguments
from tests.deploy.admission import MatchConditions
from tests.deploy.rbac import Grant, granted
from tests.deploy.test_admission_policy import LAST_APPLIED, REQUEST, held, node
from tests.deploy.test_shield_webhook import USERS as SHIELD_USERS
from tests.deploy.tools import (
    DAEMONSET_DIR,
    REPO,
    Obj,
    container,
    one,
    probe_port,
    relative,
    render_dir,
    user_kustomization,
)

OVERLAY = "openshift-4.15"
ACCOUNT = ("drain-guard", "drain-guard-webhook")
AGENT = "system:serviceaccount:drain-guard:drain-guard"


@pytest.fixture(scope="module")
def objects(rendered: Callable[[str], list[Obj]]) -> list[Obj]:
    return rendered(OVERLAY)


def entry(objects: list[Obj], name: str) -> Obj:
    configuration = one(objects, "ValidatingWebhookConfiguration")
    found: list[Obj] = [w for w in configuration["webhooks"] if w["name"] == name]
    assert len(found) == 1, name
    return found[0]


def released() -> tuple[Obj, Obj]:
    before = held()
    ops = protocol.release_patch(REQUEST, LAST_APPLIED, "101", before["metadata"]["annotations"])
    after: Obj = jsonpatch.apply_patch(before, ops)
    return before, after


def test_only_the_4_15_overlay_has_it(rendered: Callable[[str], list[Obj]]) -> None:
    for overlay in ("kubernetes", "openshift"):
        kinds = {o["kind"] for o in rendered(overlay)}
        assert "ValidatingWebhookConfiguration" not in kinds, overlay
    one(rendered(OVERLAY), "Deployment", "drain-guard-webhook")


def test_the_entries_and_what_they_do_when_it_cannot_answer(objects: list[Obj]) -> None:
    configuration = one(objects, "ValidatingWebhookConfiguration", "drain-guard")
    annotations = configuration["metadata"]["annotations"]
    assert annotations["service.beta.openshift.io/inject-cabundle"] == "true"
    policies = {w["name"]: w["failurePolicy"] for w in configuration["webhooks"]}
    assert policies == {
        "agents.drain-guard.io": "Fail",
        "release.drain-guard.io": "Ignore",
        "pods.drain-guard.io": "Fail",
    }
    for webhook in configuration["webhooks"]:
        # The agent's Node writes wait longer than any entry may take (issue 35): a write it
        # abandoned first would be cancelled before the failurePolicy could apply.
        assert webhook["timeoutSeconds"] <= ADMISSION_TIMEOUT, webhook["name"]
        assert webhook["sideEffects"] == "None"
        assert webhook["admissionReviewVersions"] == ["v1"]
    release = entry(objects, "release.drain-guard.io")
    assert [(r["resources"], r["operations"]) for r in release["rules"]] == [
        (["nodes"], ["UPDATE"])
    ]


# --- who it is called for -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "called"),
    [
        (AGENT, True),
        # Only the install's own account (a renamed one's is written in: issue 34).
        ("system:serviceaccount:platform:drain-guard", False),
        ("system:serviceaccount:drain-guard:acme-drain-guard", False),
        ("system:serviceaccount:drain-guard:drain-guard-x", False),
        ("system:serviceaccount:drain-guard:drain-guard-shield", True),
        ("system:serviceaccount:drain-guard:acme-drain-guard-shield", True),
        # The shield's by contains, as the webhook takes it (a nameSuffix too: issue 34).
        ("system:serviceaccount:drain-guard:drain-guard-shield-x", True),
        ("system:serviceaccount:platform:acme-drain-guard-shield-x", True),
        ("system:serviceaccount:drain-guard:drain-guard-webhook", False),
        ("system:serviceaccount:openshift-machine-config-operator:machine-config-daemon", False),
        ("system:node:worker-0", False),
        ("drain-guard", False),
    ],
)
def test_it_is_called_for_drain_guards_accounts_only(
    objects: list[Obj], user: str, called: bool
) -> None:
    agents = MatchConditions(entry(objects, "agents.drain-guard.io"))
    assert agents.matches(user, node(), held()) is called
    event = {"involvedObject": {"kind": "Node", "name": "worker-0"}}
    assert agents.matches(user, None, event, "CREATE", "events") is called
    release = MatchConditions(entry(objects, "release.drain-guard.io"))
    assert release.matches(user, *released()) is called


@pytest.mark.parametrize("user", SHIELD_USERS)
def test_it_is_called_for_every_account_the_webhook_takes_for_the_shield(
    objects: list[Obj], user: str
) -> None:
    """The entries' match and the webhook's own reading of the caller agree (the shield's
    account by contains, as the systemd-4.15 overlay's entry matches it): an account the
    webhook would judge is never let past it by the configuration."""
    request = {"userInfo": {"username": user}}
    taken = admission.caller(request, "drain-guard:drain-guard")
    is_shield = taken is not None and taken.is_shield
    agents = MatchConditions(entry(objects, "agents.drain-guard.io"))
    assert agents.matches(user, node(), held()) is (taken is not None)
    assert is_shield is SHIELD_USERS[user]


def test_a_release_goes_to_the_entry_that_fails_open_and_nothing_else_does(
    objects: list[Obj],
) -> None:
    """The two node entries split the agent's Node writes exactly: the release of a hold
    (and nothing that changes anything else with it) to the Ignore entry; every other write
    to the Fail entry."""
    agents = MatchConditions(entry(objects, "agents.drain-guard.io"))
    release = MatchConditions(entry(objects, "release.drain-guard.io"))
    before, after = released()
    assert release.matches(AGENT, before, after)
    assert not agents.matches(AGENT, before, after)
    marked = jsonpatch.apply_patch(
        before,
        protocol.release_patch(
            REQUEST, LAST_APPLIED, "101", before["metadata"]["annotations"], mark_released=True
        ),
    )
    assert release.matches(AGENT, before, marked)

    def riding(change: Callable[[Obj], object]) -> Obj:
        changed = copy.deepcopy(after)
        change(changed)
        return changed

    not_releases = {
        "a hold": (node(), held()),
        "a cordon with it": (before, riding(lambda n: n["spec"].update(unschedulable=True))),
        "a taint with it": (before, riding(lambda n: n["spec"].update(taints=[{"key": "k"}]))),
        "a label with it": (before, riding(lambda n: n["metadata"]["labels"].update(x="y"))),
        "another annotation": (
            before,
            riding(lambda n: n["metadata"]["annotations"].update({"example.com/x": "1"})),
        ),
        "lastAppliedDrain": (
            before,
            riding(
                lambda n: n["metadata"]["annotations"].update(
                    {protocol.LAST_APPLIED_DRAIN: REQUEST}
                )
            ),
        ),
        "another request": (
            before,
            riding(
                lambda n: n["metadata"]["annotations"].update(
                    {protocol.DESIRED_DRAIN: "drain-other"}
                )
            ),
        ),
        "a foreign key removed": (
            before,
            riding(lambda n: n["metadata"]["annotations"].pop(protocol.CURRENT_CONFIG)),
        ),
        "a hold request written": (
            before,
            riding(
                lambda n: n["metadata"]["annotations"].update(
                    {protocol.HOLD_REQUEST: "2099-01-01T00:00:00Z"}
                )
            ),
        ),
    }
    for name, (old, new) in not_releases.items():
        assert not release.matches(AGENT, old, new), name
        assert agents.matches(AGENT, old, new), name
    # Budgets and Events (no oldObject on CREATE) always go to the Fail entry.
    assert agents.matches(AGENT, None, {"metadata": {}}, "CREATE", "poddisruptionbudgets")
    assert agents.matches(AGENT, {"metadata": {}}, None, "DELETE", "poddisruptionbudgets")


def test_pods_of_the_agents_account_are_checked(objects: list[Obj]) -> None:
    """Pods of the agents' account, its name in its namespace, exactly (issue 34: a renamed
    install's is written in by the renamed-namespace transformer)."""
    pods = MatchConditions(entry(objects, "pods.drain-guard.io"))

    def pod(account: str | None, namespace: str = "drain-guard") -> Obj:
        spec = {} if account is None else {"serviceAccountName": account}
        return {"metadata": {"namespace": namespace}, "spec": spec}

    controller = "system:serviceaccount:kube-system:daemon-set-controller"
    assert pods.matches(controller, None, pod("drain-guard"), "CREATE", "pods")
    for other in ("default", "drain-guard-webhook", "drain-guard-shield", "acme-drain-guard", None):
        assert not pods.matches(controller, None, pod(other), "CREATE", "pods"), other
    assert not pods.matches(controller, None, pod("drain-guard", "elsewhere"), "CREATE", "pods")


# --- where the API server finds it -----------------------------------------------------------


def webhook_args(objects: list[Obj]) -> argparse.Namespace:
    box = container(objects, "drain-guard-webhook", one(objects, "Deployment", ACCOUNT[1]))
    assert box["args"][0] == "webhook"
    parser = argparse.ArgumentParser()
    add_webhook_arguments(parser)
    return parser.parse_args(box["args"][1:])


def test_the_api_server_reaches_it_through_its_service_with_its_certificate(
    objects: list[Obj],
) -> None:
    deployment = one(objects, "Deployment", ACCOUNT[1])
    service = one(objects, "Service", ACCOUNT[1])
    box = container(objects, "drain-guard-webhook", deployment)
    args = webhook_args(objects)
    for webhook in one(objects, "ValidatingWebhookConfiguration", "drain-guard")["webhooks"]:
        ref = webhook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"], ref["path"]) == (*reversed(ACCOUNT), "/validate")
        (port,) = (p for p in service["spec"]["ports"] if p["port"] == ref["port"])
        assert probe_port(box, port["targetPort"]) == port_number(args)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    secret = service["metadata"]["annotations"][
        "service.beta.openshift.io/serving-cert-secret-name"
    ]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    (mount,) = (m for m in box["volumeMounts"] if m["mountPath"] == "/etc/tls/private")
    assert volumes[mount["name"]]["secret"]["secretName"] == secret
    assert mount["readOnly"] is True
    assert (args.tls_cert_file, args.tls_private_key_file) == (
        "/etc/tls/private/tls.crt",
        "/etc/tls/private/tls.key",
    )
    for probe in ("livenessProbe", "readinessProbe"):
        assert box[probe]["httpGet"]["scheme"] == "HTTPS"
        assert probe_port(box, box[probe]["httpGet"]["port"]) == port_number(args)


def port_number(args: argparse.Namespace) -> int:
    return int(args.listen.rsplit(":", 1)[1])


def test_its_tls_flags_are_the_proxys(objects: list[Obj]) -> None:
    """The cluster's TLS profile, set once for both (tls-modern switches both)."""
    proxy = container(objects, "kube-rbac-proxy", one(objects, "DaemonSet", "drain-guard"))
    args = webhook_args(objects)
    flags = dict(a.removeprefix("--").split("=", 1) for a in proxy["args"])
    assert args.tls_min_version == flags["tls-min-version"]
    assert args.tls_cipher_suites == flags["tls-cipher-suites"]


# --- how it stays up -------------------------------------------------------------------------


def test_two_replicas_on_two_control_plane_nodes_and_a_budget(objects: list[Obj]) -> None:
    deployment = one(objects, "Deployment", ACCOUNT[1])
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    spec = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/master": ""}
    (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    budget = one(objects, "PodDisruptionBudget", ACCOUNT[1])
    assert budget["spec"] == {"minAvailable": 1, "selector": {"matchLabels": dict(labels)}}
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["serviceAccountName"] == ACCOUNT[1]
    template = deployment["spec"]["template"]["metadata"]
    assert template["annotations"]["openshift.io/required-scc"] == "restricted-v2"
    for box in spec["containers"]:
        ctx = box["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"] == {"drop": ["ALL"]}
        assert "runAsUser" not in ctx


def test_only_the_host_network_reaches_its_port(objects: list[Obj]) -> None:
    """Issue 34: no pod reaches /validate (the API servers and the kubelet's probes come from
    the host network); the policy selects the webhook's pods and no other."""
    deployment = one(objects, "Deployment", ACCOUNT[1])
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (port,) = container(objects, ACCOUNT[1], deployment)["ports"]
    policy = one(objects, "NetworkPolicy", ACCOUNT[1])
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert policy["spec"]["podSelector"] == {"matchLabels": dict(labels)}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    host_network = {"matchLabels": {"policy-group.network.openshift.io/host-network": ""}}
    assert rule["from"] == [{"namespaceSelector": host_network}]
    assert rule["ports"] == [{"protocol": "TCP", "port": port["containerPort"]}]
    assert [o for o in objects if o["kind"] == "NetworkPolicy"] == [policy]


# --- what its own account may do ------------------------------------------------------------


def wanted(namespace: str) -> set[Grant]:
    grants = set()
    for p in WEBHOOK_PERMISSIONS:
        for verb in p.verbs:
            if p.scope is Scope.MCO:
                grants |= {Grant(p.api_group, p.resource, verb, ns, ()) for ns in MCO_NAMESPACES}
            else:
                assert p.scope is Scope.OWN_NAMESPACE
                grants.add(Grant(p.api_group, p.resource, verb, namespace, ()))
    return grants


def test_its_account_reads_pods_and_nothing_else(objects: list[Obj]) -> None:
    actual = granted(objects, ACCOUNT)
    assert actual == wanted("drain-guard"), sorted(actual ^ wanted("drain-guard"))


def test_an_install_in_another_namespace_with_a_prefix_keeps_it_working(tmp_path: Path) -> None:
    """docs/install.md, "Another namespace", with a kustomize namePrefix too: the API server
    finds the renamed Service, the account keeps its rights where they act, and the renamed
    agent account is still matched."""
    mine = tmp_path / "mine"
    fixups = relative(DAEMONSET_DIR / "transformers" / "renamed-namespace", mine)
    objects = render_dir(
        user_kustomization(
            mine, OVERLAY, namespace="other-ns", namePrefix="acme-", transformers=[fixups]
        )
    )
    configuration = one(objects, "ValidatingWebhookConfiguration", "acme-drain-guard")
    for webhook in configuration["webhooks"]:
        ref = webhook["clientConfig"]["service"]
        assert (ref["namespace"], ref["name"]) == ("other-ns", "acme-drain-guard-webhook")
    one(objects, "Service", "acme-drain-guard-webhook")
    actual = granted(objects, ("other-ns", "acme-drain-guard-webhook"))
    assert actual == wanted("other-ns"), sorted(actual ^ wanted("other-ns"))
    agents = MatchConditions(entry(objects, "agents.drain-guard.io"))
    assert agents.matches("system:serviceaccount:other-ns:acme-drain-guard", node(), held())
    for other in ("other-ns:drain-guard", "drain-guard:acme-drain-guard"):
        assert not agents.matches(f"system:serviceaccount:{other}", node(), held()), other
    daemonset = one(objects, "DaemonSet", "acme-drain-guard")
    pods = MatchConditions(entry(objects, "pods.drain-guard.io"))
    template = daemonset["spec"]["template"] | {"metadata": {"namespace": "other-ns"}}
    assert pods.matches("x", None, template, "CREATE", "pods")
    # The webhook itself is told the renamed account.
    box = container(
        objects, "drain-guard-webhook", one(objects, "Deployment", "acme-drain-guard-webhook")
    )
    assert box["args"][-2:] == ["--agent-account", "other-ns:acme-drain-guard"]


def documented_patches(marker: str) -> list[Obj]:
    """The ``patches:`` of the YAML block of docs/install.md that holds ``marker``."""
    text = (REPO / "docs" / "install.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if marker in b]
    patches: list[Obj] = yaml.safe_load(block)["patches"]
    return patches


def test_the_documented_peers_for_another_network_plugin_replace_the_label(
    tmp_path: Path,
) -> None:
    """install.md's patch for a cluster whose network plugin does not label host traffic
    (OpenShiftSDN): the overlay with it renders, and only the listed addresses reach the
    port."""
    patches = documented_patches("kind: NetworkPolicy, name: drain-guard-webhook")
    objects = render_dir(user_kustomization(tmp_path, OVERLAY, patches=patches))
    (rule,) = one(objects, "NetworkPolicy", ACCOUNT[1])["spec"]["ingress"]
    assert rule["from"]
    assert all(set(peer) == {"ipBlock"} for peer in rule["from"])
    assert all(peer["ipBlock"]["cidr"].endswith("/32") for peer in rule["from"])
    assert rule["ports"] == [{"protocol": "TCP", "port": 9443}]
