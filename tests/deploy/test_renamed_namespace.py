"""An install in another namespace, as docs/install.md's "Another namespace" writes it.

A user's kustomization in a temporary directory renames the namespace to ``other-ns`` (with
kustomize's ``namespace:`` field for the OpenShift overlays, with a NamespaceTransformer for
every overlay) and lists daemonset/transformers/renamed-namespace after it; ``kubectl
kustomize`` renders it. Then: every grant the default install gives the agent is given to
``other-ns/drain-guard`` and none to ``drain-guard/drain-guard``; the objects that must stay
in openshift-machine-config-operator and default stay there; the admission policies still
match the agent (their CEL run with ``system:serviceaccount:other-ns:drain-guard``); the
strings that name the namespace follow it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes_validate
import pytest

from tests.deploy.admission import Policy, admitted_pod
from tests.deploy.authorizer import Request, allows, proxy_config, scrape
from tests.deploy.tools import (
    CLUSTER_SCOPED,
    DAEMONSET_DIR,
    MIN_KUBERNETES,
    OVERLAYS,
    WITH_ADMISSION_POLICY,
    Obj,
    key,
    one,
    relative,
    render_dir,
    user_kustomization,
)

OLD, NEW = "drain-guard", "other-ns"
PINNED = "drain-guard.io/namespace"
FIXUPS = DAEMONSET_DIR / "transformers" / "renamed-namespace"
OPENSHIFT = ("openshift", "openshift-4.15")
# (the way the namespace is renamed, overlay): kustomize's `namespace:` renames every Namespace
# object, so it cannot rename the kubernetes overlay (which also creates MCO's namespace).
FORMS = [("namespace-field", o) for o in OPENSHIFT] + [("transformer", o) for o in OVERLAYS]


def renamed_kustomization(directory: Path, overlay: str, form: str, *, fixups: bool = True) -> Path:
    transformers = [relative(FIXUPS, directory)] if fixups else []
    if form == "namespace-field":
        return user_kustomization(directory, overlay, namespace=NEW, transformers=transformers)
    rename = (
        "apiVersion: builtin\n"
        "kind: NamespaceTransformer\n"
        "metadata:\n"
        "  name: namespace\n"
        f"  namespace: {NEW}\n"
    )
    return user_kustomization(directory, overlay, transformers=[rename, *transformers])


@pytest.fixture(params=FORMS, ids=[f"{f}-{o}" for f, o in FORMS])
def case(request: pytest.FixtureRequest) -> tuple[str, str]:
    form, overlay = request.param
    return form, overlay


@pytest.fixture
def renamed(case: tuple[str, str], tmp_path: Path) -> list[Obj]:
    form, overlay = case
    return render_dir(renamed_kustomization(tmp_path / "my-drain-guard", overlay, form))


@pytest.fixture
def default(rendered: Callable[[str], list[Obj]], case: tuple[str, str]) -> list[Obj]:
    return rendered(case[1])


def moved(namespace: str) -> str:
    return NEW if namespace == OLD else namespace


def agent_requests(objects: list[Obj]) -> Iterator[Request]:
    """Every request the default install's RBAC lets the agent's account make."""
    roles = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
    }
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            (s.get("kind"), s.get("namespace"), s.get("name")) == ("ServiceAccount", OLD, OLD)
            for s in binding["subjects"]
        ):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace", "")
        role = roles[(ref["kind"], "" if ref["kind"] == "ClusterRole" else namespace, ref["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames", [""]):
                            yield Request(verb, group, resource, namespace, name=name)


def test_the_agents_grants_follow_the_rename(default: list[Obj], renamed: list[Obj]) -> None:
    requests = list(agent_requests(default))
    assert requests
    for request in requests:
        there = Request(
            request.verb,
            request.api_group,
            request.resource,
            moved(request.namespace),
            name=request.name,
        )
        assert allows(renamed, (NEW, OLD), there), there
        assert not allows(renamed, (OLD, OLD), there), there


def test_objects_outside_the_agents_namespace_stay_where_they_are(
    default: list[Obj], renamed: list[Obj]
) -> None:
    """The pod-read (and shield) Role and RoleBinding in openshift-machine-config-operator,
    the Events RoleBinding in default: where the agent reads and writes, not where it runs."""
    elsewhere = {key(o) for o in default if o["metadata"].get("namespace") not in (None, OLD)}
    assert ("RoleBinding", "openshift-machine-config-operator", "drain-guard-shield") in elsewhere
    assert {
        key(o) for o in renamed if o["metadata"].get("namespace") not in (None, NEW)
    } == elsewhere
    for obj in renamed:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert namespace is None, key(obj)
        elif key(obj) not in elsewhere:
            assert namespace == NEW, key(obj)


def test_the_namespace_object_is_the_new_one(default: list[Obj], renamed: list[Obj]) -> None:
    """Renamed with its labels (Pod Security, OpenShift monitoring); MCO's namespace, which
    the kubernetes overlay creates, keeps its name."""
    old = {o["metadata"]["name"]: o for o in default if o["kind"] == "Namespace"}
    new = {o["metadata"]["name"]: o for o in renamed if o["kind"] == "Namespace"}
    assert set(new) == {moved(n) for n in old}
    assert new[NEW]["metadata"]["labels"] == old[OLD]["metadata"]["labels"]


@pytest.mark.parametrize("newest", [False, True], ids=["oldest", "newest"])
def test_renamed_objects_validate(case: tuple[str, str], renamed: list[Obj], newest: bool) -> None:
    version = kubernetes_validate.latest_version() if newest else MIN_KUBERNETES[case[1]]
    for obj in renamed:
        with contextlib.suppress(kubernetes_validate.SchemaNotFoundError):  # custom kinds
            kubernetes_validate.validate(obj, version, strict=True)


def test_admission_policies_still_confine_the_agent(
    case: tuple[str, str], renamed: list[Obj]
) -> None:
    user = f"system:serviceaccount:{NEW}:{OLD}"
    policies = [
        o
        for o in renamed
        if o["kind"] == "ValidatingAdmissionPolicy"
        # everyone's hold requests and releases, not the agent's writes (test_admission_policy)
        and o["metadata"]["name"]
        not in ("drain-guard-hold-request-format", "drain-guard-released-by")
    ]
    assert len(policies) == (4 if case[1] in WITH_ADMISSION_POLICY else 0)
    for obj in policies:
        policy = Policy(obj)
        if obj["metadata"]["name"] == "drain-guard-pod-confinement":
            pod = admitted_pod(renamed)
            assert pod["metadata"]["namespace"] == NEW
            verdict = policy.review(user, None, None, pod, operation="CREATE")
            assert verdict.applies
            assert verdict.admitted, verdict.denied
            pod["spec"]["hostPID"] = True
            assert not policy.review(user, None, None, pod, operation="CREATE").admitted
        else:
            # A write without the node-name claim: matched, and refused.
            verdict = policy.review(user, None, {}, {})
            assert verdict.applies, obj["metadata"]["name"]
            assert not verdict.admitted, obj["metadata"]["name"]


@pytest.mark.parametrize("form", ["namespace-field", "transformer"])
@pytest.mark.parametrize("overlay", OPENSHIFT)
def test_metrics_names_follow_the_rename(tmp_path: Path, form: str, overlay: str) -> None:
    """The TLS server name Prometheus checks is the Service's new DNS name, and the attribute
    kube-rbac-proxy checks is in the new namespace, where the platform Prometheus has it."""
    objects = render_dir(renamed_kustomization(tmp_path / "mine", overlay, form))
    service = one(objects, "Service", "drain-guard-metrics")
    (endpoint,) = one(objects, "ServiceMonitor", "drain-guard")["spec"]["endpoints"]
    assert endpoint["tlsConfig"]["serverName"] == f"drain-guard-metrics.{NEW}.svc"
    assert service["metadata"]["namespace"] == NEW
    attributes = proxy_config(objects)["authorization"]["resourceAttributes"]
    assert attributes["namespace"] == NEW
    assert allows(objects, ("openshift-monitoring", "prometheus-k8s"), scrape(objects))


def test_without_the_fixups_the_rename_breaks_the_install(tmp_path: Path) -> None:
    """Why the transformers line is needed: kustomize's `namespace:` alone moves the Role the
    agent reads pods with out of MCO's namespace, and the scrape attribute stays behind."""
    directory = renamed_kustomization(
        tmp_path / "mine", "openshift", "namespace-field", fixups=False
    )
    objects = render_dir(directory)
    shield = one(objects, "RoleBinding", "drain-guard-shield")
    assert shield["metadata"]["namespace"] == NEW
    assert proxy_config(objects)["authorization"]["resourceAttributes"]["namespace"] == OLD
    assert not allows(objects, ("openshift-monitoring", "prometheus-k8s"), scrape(objects))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_outside_the_agents_namespace_is_pinned(
    rendered: Callable[[str], list[Obj]], overlay: str
) -> None:
    """What keeps an object where it is in a renamed install is its drain-guard.io/namespace
    annotation: an object added outside the agent's namespace without it would be moved."""
    for obj in rendered(overlay):
        namespace = obj["metadata"].get("namespace")
        if namespace not in (None, OLD):
            assert obj["metadata"].get("annotations", {}).get(PINNED) == namespace, key(obj)
