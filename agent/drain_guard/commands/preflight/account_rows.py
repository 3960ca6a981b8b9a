"""docs/rights.md's rows about what an identity beyond its Node could reach: tokens, Secrets,
pools, certificates, pods, evictions; every write a dry run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drain_guard.commands.preflight.probe import (
    Answer,
    Probe,
    Request,
    answer_of,
    api_call,
    made,
    unique_name,
    watch_call,
)
from drain_guard.commands.preflight.survey import MCO_GROUP
from drain_guard.confine.permissions import MCO_NAMESPACES

if TYPE_CHECKING:
    pass


#: The webhook's account, named after the agent's (openshift-4.15: ``drain-guard-webhook``).
WEBHOOK_ACCOUNT = "{agent}-webhook"


def token(namespace: str | None, account: str | None) -> Request:
    """A TokenRequest for ``account`` (None: the agent's own; ``{agent}`` in it: the agent's
    name), in ``namespace`` (None: the agent's)."""

    async def make(probe: Probe) -> tuple[Answer, str]:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": []},
        }
        create = probe.agent.core.create_namespaced_service_account_token
        return made(
            await answer_of(
                api_call(
                    create,
                    (account or "{agent}").format(agent=probe.who.account),
                    namespace or probe.who.namespace,
                    body,
                    dry_run="All",
                )
            )
        )

    return make


async def read_pool(probe: Probe) -> tuple[Answer, str]:
    get = probe.agent.custom.get_cluster_custom_object
    return made(await answer_of(api_call(get, MCO_GROUP, "v1", "machineconfigpools", probe.pool)))


async def list_pools(probe: Probe) -> tuple[Answer, str]:
    list_all = probe.agent.custom.list_cluster_custom_object
    return made(await answer_of(api_call(list_all, MCO_GROUP, "v1", "machineconfigpools")))


def mco_read(plural: str, *, watch: bool = False) -> Request:
    """A list (or a one-second watch) of every object of MCO's cluster-scoped ``plural`` in
    ``v1``: what the noop-image guard reads. Where ``v1`` does not serve it (4.15, or 4.16's
    ``v1alpha1``) the API server answers 404 after the authorizer let it through."""

    async def make(probe: Probe) -> tuple[Answer, str]:
        list_all = probe.agent.custom.list_cluster_custom_object
        if watch:
            opened = watch_call(list_all, MCO_GROUP, "v1", plural, timeout_seconds=1)
            return made(await answer_of(opened))
        return made(await answer_of(api_call(list_all, MCO_GROUP, "v1", plural)))

    return make


async def update_pool(probe: Probe) -> tuple[Answer, str]:
    patch = probe.agent.custom.patch_cluster_custom_object
    body = {"metadata": {"labels": {"drain-guard.io/preflight": "x"}}}
    return made(
        await answer_of(
            api_call(patch, MCO_GROUP, "v1", "machineconfigpools", probe.pool, body, dry_run="All")
        )
    )


async def delete_build(probe: Probe) -> tuple[Answer, str]:
    """The authorizer answers before the MachineOSBuild is looked up: any name will do."""
    delete = probe.agent.custom.delete_cluster_custom_object
    name = unique_name("build")
    return made(
        await answer_of(api_call(delete, MCO_GROUP, "v1", "machineosbuilds", name, dry_run="All"))
    )


async def own_secrets(probe: Probe) -> tuple[Answer, str]:
    return made(
        await answer_of(api_call(probe.agent.core.list_namespaced_secret, probe.who.namespace))
    )


async def mco_secret(probe: Probe) -> tuple[Answer, str]:
    """The authorizer answers before the Secret is looked up: any name will do."""
    read = probe.agent.core.read_namespaced_secret
    return made(await answer_of(api_call(read, unique_name("secret"), MCO_NAMESPACES[0])))


async def all_secrets(probe: Probe) -> tuple[Answer, str]:
    return made(await answer_of(api_call(probe.agent.core.list_secret_for_all_namespaces)))


async def create_csr(probe: Probe) -> tuple[Answer, str]:
    from kubernetes_asyncio.client.api.certificates_v1_api import CertificatesV1Api

    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": unique_name("csr")},
        "spec": {
            "request": "",
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["client auth"],
        },
    }
    create = CertificatesV1Api(probe.agent.api).create_certificate_signing_request
    return made(await answer_of(api_call(create, body, dry_run="All")))


async def create_pod(probe: Probe) -> tuple[Answer, str]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": unique_name("pod")},
        "spec": {"nodeName": probe.who.node, "containers": [{"name": "c", "image": "x"}]},
    }
    create = probe.agent.core.create_namespaced_pod
    return made(await answer_of(api_call(create, probe.who.namespace, body, dry_run="All")))


async def evict(probe: Probe) -> tuple[Answer, str]:
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": probe.who.pod, "namespace": probe.who.namespace},
    }
    create = probe.agent.core.create_namespaced_pod_eviction
    return made(
        await answer_of(api_call(create, probe.who.pod, probe.who.namespace, body, dry_run="All"))
    )
