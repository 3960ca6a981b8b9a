"""The components of the opt-in rights, rendered from docs/install.md's kustomizations as
written: ``blocking-pods`` (an opted-in namespace's pod read), ``disruption-budgets`` (the
named budgets' read) and ``thanos-querier-alerts`` (the Thanos querier's alerts). Each grants
its one rule and nothing else; on the real API server: tests/controlplane/test_blocking.py,
test_disruption_budget.py and test_components.py."""

from __future__ import annotations

from pathlib import Path

from drain_guard.confine.permissions import OPT_IN_PERMISSIONS
from tests.deploy.tools import DAEMONSET_DIR, key, one, relative, render, render_dir
from tests.deploy.tools import documented_kustomization as documented

AGENT = {"kind": "ServiceAccount", "name": "drain-guard", "namespace": "drain-guard"}


def test_blocking_pods_is_a_role_and_its_binding_in_the_namespace_named(tmp_path: Path) -> None:
    objects = render_dir(documented("Blocking pods", tmp_path, "batch"))
    assert sorted(key(o) for o in objects) == [
        ("Role", "batch", "drain-guard-blocking-pods"),
        ("RoleBinding", "batch", "drain-guard-blocking-pods"),
    ]
    role = one(objects, "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    binding = one(objects, "RoleBinding")
    assert binding["roleRef"]["name"] == "drain-guard-blocking-pods"
    assert binding["subjects"] == [AGENT]  # the agent's account stays in its namespace


def test_blocking_pods_without_a_namespace_names_none_that_exists(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        f"components:\n  - {relative(DAEMONSET_DIR / 'components' / 'blocking-pods', tmp_path)}\n"
    )
    namespaces = {o["metadata"]["namespace"] for o in render_dir(tmp_path)}
    assert namespaces == {"blocking-pod-namespace"}


def test_disruption_budgets_is_a_role_limited_to_the_budgets_named(tmp_path: Path) -> None:
    directory = documented("Disruption budgets", tmp_path, "db")
    kustomization = directory / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace("[NAME]", "[quorum, osd]"))
    objects = render_dir(directory)
    assert sorted(key(o) for o in objects) == [
        ("Role", "db", "drain-guard-disruption-budgets"),
        ("RoleBinding", "db", "drain-guard-disruption-budgets"),
    ]
    [rule] = one(objects, "Role")["rules"]
    assert rule["resourceNames"] == ["quorum", "osd"]
    binding = one(objects, "RoleBinding")
    assert binding["roleRef"]["name"] == "drain-guard-disruption-budgets"
    assert binding["subjects"] == [AGENT]


def test_disruption_budgets_unpatched_names_no_namespace_and_no_budget_that_exist(
    tmp_path: Path,
) -> None:
    component = relative(DAEMONSET_DIR / "components" / "disruption-budgets", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(f"components:\n  - {component}\n")
    objects = render_dir(tmp_path)
    assert {o["metadata"]["namespace"] for o in objects} == {"disruption-budget-namespace"}
    assert one(objects, "Role")["rules"][0]["resourceNames"] == ["disruption-budget-name"]


def test_each_opt_in_component_grants_what_permissions_py_lists_for_it() -> None:
    for name, granted in OPT_IN_PERMISSIONS.items():
        [role] = [o for o in render_dir(DAEMONSET_DIR / "components" / name) if o["kind"] == "Role"]
        rules = {
            (group, resource, verb)
            for rule in role["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
        listed = {(p.api_group, p.resource, v) for p in granted for v in p.verbs}
        assert rules == listed, name


def test_thanos_querier_alerts_adds_get_namespaces_and_nothing_else(tmp_path: Path) -> None:
    plain = render("openshift")
    objects = render_dir(documented("Alert gating", tmp_path))
    assert [o for o in objects if o in plain] == plain  # the overlay unchanged
    added = [o for o in objects if o not in plain]
    assert sorted(key(o) for o in added) == [
        ("ClusterRole", "", "drain-guard-alerts"),
        ("ClusterRoleBinding", "", "drain-guard-alerts"),
    ]
    rules = one(added, "ClusterRole")["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]
    assert one(added, "ClusterRoleBinding")["subjects"] == [AGENT]


def test_thanos_querier_alerts_follows_an_install_in_another_namespace(tmp_path: Path) -> None:
    written = documented("Alert gating", tmp_path / "user")
    kustomization = (written / "kustomization.yaml").read_text()
    transformer = relative(DAEMONSET_DIR / "transformers" / "renamed-namespace", written)
    (written / "kustomization.yaml").write_text(
        f"namespace: platform-drain-guard\n{kustomization}transformers:\n  - {transformer}\n"
    )
    binding = one(render_dir(written), "ClusterRoleBinding", "drain-guard-alerts")
    assert binding["subjects"] == [{**AGENT, "namespace": "platform-drain-guard"}]
