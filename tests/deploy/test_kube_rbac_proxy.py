"""The OpenShift metrics endpoints: kube-rbac-proxy's flags, TLS profile and authorization, for
every workload behind it (the agents' DaemonSet, the central shield's Deployment) in every
rendering that has one (the openshift and openshift-4.15 overlays, the central shield alone).

What the proxy reads is checked as it reads it: each flag against the flags of the pinned
kube-rbac-proxy version, the TLS flags against OpenShift's TLS profiles turned into Go cipher
names as MCO does for its own proxies, and the config file (found through the container's
mount, its volume and the ConfigMap) as the SubjectAccessReview it produces, which the
rendered RBAC (tests/deploy/authorizer.py) must allow the platform Prometheus and nobody else.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.deploy.authorizer import Request, allows, proxy_config, scrape
from tests.deploy.tools import (
    DAEMONSET_DIR,
    Obj,
    container,
    one,
    pod_spec,
    proxied,
    relative,
    render_dir,
    user_kustomization,
)

PROMETHEUS = ("openshift-monitoring", "prometheus-k8s")
#: Each rendering on OpenShift, and the workloads that must be behind the proxy there: every
#: drain-guard workload (its /metrics and /status name nodes, builds and budgets) but the
#: admission webhook, which serves no metrics and its own TLS (tests/deploy/test_webhook.py).
BEHIND_THE_PROXY = {
    "openshift": [("DaemonSet", "drain-guard")],
    "openshift-4.15": [("DaemonSet", "drain-guard")],
    "systemd": [("Deployment", "drain-guard-shield")],
}
WORKLOADS = [(r, kind, name) for r, ws in BEHIND_THE_PROXY.items() for kind, name in ws]
IDS = [f"{r}-{kind}" for r, kind, _ in WORKLOADS]

# The version the manifests pin, and its flags (cmd/kube-rbac-proxy/app/options/options.go of
# brancz/kube-rbac-proxy v0.21.0). Bump both together, after reading the new options.go.
PROXY_VERSION = "v0.21.0"
PROXY_FLAGS = {
    "secure-listen-address",
    "upstream",
    "upstream-force-h2c",
    "upstream-ca-file",
    "config-file",
    "allow-paths",
    "ignore-paths",
    "proxy-endpoints-port",
    "tls-cert-file",
    "tls-private-key-file",
    "tls-min-version",
    "tls-cipher-suites",
    "upstream-client-cert-file",
    "upstream-client-key-file",
    "client-ca-file",
    "auth-header-fields-enabled",
    "auth-token-audiences",
    "kubeconfig",
    "http2-disable",
}

# OpenShift's TLS profiles (openshift/api, config/v1 types_tlssecurityprofile.go, TLSProfiles):
# the minimum version and the ciphers, by their OpenSSL names.
TLS_PROFILES = {
    "Intermediate": (
        "VersionTLS12",
        (
            "TLS_AES_128_GCM_SHA256",
            "TLS_AES_256_GCM_SHA384",
            "TLS_CHACHA20_POLY1305_SHA256",
            "ECDHE-ECDSA-AES128-GCM-SHA256",
            "ECDHE-RSA-AES128-GCM-SHA256",
            "ECDHE-ECDSA-AES256-GCM-SHA384",
            "ECDHE-RSA-AES256-GCM-SHA384",
            "ECDHE-ECDSA-CHACHA20-POLY1305",
            "ECDHE-RSA-CHACHA20-POLY1305",
        ),
    ),
    "Modern": (
        "VersionTLS13",
        ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"),
    ),
}
# How MCO turns those names into kube-rbac-proxy's --tls-cipher-suites (openshift/library-go,
# pkg/crypto OpenSSLToIANACipherSuites; Go's crypto/tls names), for the names above.
OPENSSL_TO_GO = {
    "TLS_AES_128_GCM_SHA256": "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384": "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256": "TLS_CHACHA20_POLY1305_SHA256",
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
}


def proxy_flags(objects: list[Obj], workload: Obj | None = None) -> dict[str, str]:
    args = container(objects, "kube-rbac-proxy", workload)["args"]
    assert all(a.startswith("--") and "=" in a for a in args), args
    flags = dict(a.removeprefix("--").split("=", 1) for a in args)
    assert len(flags) == len(args), "a flag is given twice"
    return flags


def profile_flags(profile: str) -> dict[str, str]:
    minimum, ciphers = TLS_PROFILES[profile]
    return {
        "tls-min-version": minimum,
        "tls-cipher-suites": ",".join(OPENSSL_TO_GO[c] for c in ciphers),
    }


def tls_flags(objects: list[Obj], workload: Obj | None = None) -> dict[str, str]:
    flags = proxy_flags(objects, workload)
    return {k: flags[k] for k in ("tls-min-version", "tls-cipher-suites")}


@pytest.fixture(params=WORKLOADS, ids=IDS)
def proxied_workload(
    request: pytest.FixtureRequest, rendered: Callable[[str], list[Obj]]
) -> tuple[list[Obj], Obj]:
    """One rendering's objects and one of its workloads behind the proxy."""
    rendering, kind, name = request.param
    objects = rendered(rendering)
    return objects, one(objects, kind, name)


@pytest.mark.parametrize("rendering", BEHIND_THE_PROXY)
def test_every_workload_has_the_one_sidecar(
    rendered: Callable[[str], list[Obj]], rendering: str
) -> None:
    """Each drain-guard workload gets the sidecar once, as the second container (its own stays
    first)."""
    objects = rendered(rendering)
    workloads = [
        o
        for o in objects
        if o["kind"] in ("DaemonSet", "Deployment")
        and o["metadata"]["name"] != "drain-guard-webhook"
    ]
    assert [(w["kind"], w["metadata"]["name"]) for w in proxied(objects)] == [
        (w["kind"], w["metadata"]["name"]) for w in workloads
    ]
    assert sorted((w["kind"], w["metadata"]["name"]) for w in workloads) == sorted(
        BEHIND_THE_PROXY[rendering]
    )
    for workload in workloads:
        names = [c["name"] for c in workload["spec"]["template"]["spec"]["containers"]]
        assert names == [names[0], "kube-rbac-proxy"], names
        assert names.count("kube-rbac-proxy") == 1, names
        volumes = [v["name"] for v in workload["spec"]["template"]["spec"]["volumes"]]
        assert len(volumes) == len(set(volumes)), volumes


def test_every_flag_exists_in_the_pinned_proxy(proxied_workload: tuple[list[Obj], Obj]) -> None:
    objects, workload = proxied_workload
    image = container(objects, "kube-rbac-proxy", workload)["image"]
    assert image.split("@")[0].endswith(f":{PROXY_VERSION}"), image
    assert set(proxy_flags(objects, workload)) <= PROXY_FLAGS


def test_tls_follows_openshifts_intermediate_profile(
    proxied_workload: tuple[list[Obj], Obj],
) -> None:
    """Intermediate is the default of the cluster's APIServer tlsSecurityProfile; MCO renders
    the same flags for its kube-rbac-proxies from it."""
    assert tls_flags(*proxied_workload) == profile_flags("Intermediate")


@pytest.mark.parametrize("rendering", BEHIND_THE_PROXY)
def test_the_tls_modern_component_switches_to_the_modern_profile(
    rendered: Callable[[str], list[Obj]], rendering: str, tmp_path: Path
) -> None:
    mine = tmp_path / "my-drain-guard"
    component = DAEMONSET_DIR / "components" / "tls-modern"
    user_kustomization(mine, rendering, components=[relative(component, mine)])
    objects = render_dir(mine)
    # Every proxy switched, and nothing else changes.
    default = rendered(rendering)
    for workload in proxied(default):
        switched = one(objects, workload["kind"], workload["metadata"]["name"])
        assert tls_flags(objects, switched) == profile_flags("Modern")
        expected = container(default, "kube-rbac-proxy", workload)
        expected["args"] = [
            f"--{k}={profile_flags('Modern')[k]}" if k in profile_flags("Modern") else f"--{k}={v}"
            for k, v in (a.removeprefix("--").split("=", 1) for a in expected["args"])
        ]
        workload["spec"]["template"]["spec"]["containers"][1] = expected
    # The admission webhook (openshift-4.15) takes the same flags, switched too.
    for workload in default:
        if workload["metadata"].get("labels", {}).get("drain-guard.io/tls-flags") != "webhook":
            continue
        box = workload["spec"]["template"]["spec"]["containers"][0]
        modern = profile_flags("Modern")
        flag = [a.removeprefix("--").split("=", 1)[0] for a in box["args"]]
        box["args"] = [
            f"--{k}={modern[k]}" if k in modern else a
            for k, a in zip(flag, box["args"], strict=True)
        ]
    assert objects == default


def test_the_profiles_cipher_names_are_gos(rendered: Callable[[str], list[Obj]]) -> None:
    """The flag takes Go's crypto/tls names; OpenSSL's (as the profile writes them) are refused
    at start, and the container crash-loops."""
    ciphers = tls_flags(rendered("openshift"))["tls-cipher-suites"].split(",")
    assert set(ciphers) <= set(OPENSSL_TO_GO.values())
    assert not {c for c in ciphers if "-" in c}


def test_scrapes_are_authorised_by_a_resource_attribute(
    proxied_workload: tuple[list[Obj], Obj],
) -> None:
    """As MCO's daemon metrics: the SubjectAccessReview asks for namespace/metrics in the
    workload's namespace; never a rewrite from the request (a scraper would choose what is
    checked) and no static authorization."""
    objects, workload = proxied_workload
    namespace = workload["metadata"]["namespace"]
    assert proxy_config(objects, workload) == {
        "authorization": {
            "resourceAttributes": {
                "apiVersion": "v1",
                "resource": "namespace",
                "subresource": "metrics",
                "namespace": namespace,
            }
        }
    }


def test_only_the_platform_prometheus_may_scrape(
    proxied_workload: tuple[list[Obj], Obj],
) -> None:
    objects, workload = proxied_workload
    request = scrape(objects, workload)
    assert allows(objects, PROMETHEUS, request)
    namespace = request.namespace
    for other in (
        (namespace, "drain-guard"),
        (namespace, "drain-guard-shield"),
        (namespace, "default"),
        ("openshift-monitoring", "alertmanager-main"),
        ("openshift-user-workload-monitoring", "prometheus-user-workload"),
    ):
        assert not allows(objects, other, request), other
    # The grant is that one attribute, nothing else.
    role = one(objects, "Role", "drain-guard-metrics")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["namespace/metrics"], "verbs": ["get"]}
    ]


def test_each_proxy_may_review_scrapers_with_its_pods_account(
    proxied_workload: tuple[list[Obj], Obj],
) -> None:
    """The proxy sends its TokenReview and SubjectAccessReview with the pod's own account:
    without these a scrape is answered 401/500, and Prometheus sees the target down."""
    objects, workload = proxied_workload
    account = (workload["metadata"]["namespace"], pod_spec(objects, workload)["serviceAccountName"])
    for group, resource in (
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    ):
        assert allows(objects, account, Request("create", group, resource, "")), resource


def test_the_authorizer_has_teeth(rendered: Callable[[str], list[Obj]]) -> None:
    """Without the Role's binding, the platform Prometheus may not scrape."""
    objects = [
        o
        for o in rendered("openshift")
        if (o["kind"], o["metadata"]["name"]) != ("RoleBinding", "drain-guard-metrics")
    ]
    assert not allows(objects, PROMETHEUS, scrape(objects))
