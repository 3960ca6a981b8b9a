"""A ValidatingAdmissionPolicy evaluated as the API server does, with cel-python.

cel-python implements standard CEL; the policies use only standard CEL (``has``, ``in``,
``all``, ``filter``, ``startsWith``, ``size``, the conditional), not the Kubernetes CEL
libraries, so the interpreter sees what the API server would. Evaluation follows the API
server: a false or failing match condition means the policy does not apply; variables are
evaluated in order (lazily there: an error is kept and only fails what reads it); every
validation must yield true, and an evaluation error denies (``failurePolicy: Fail``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy.adapter import json_to_cel
from celpy.celtypes import BoolType, MapType, StringType
from celpy.evaluation import CELEvalError

from tests.deploy.tools import Obj, one


@dataclass(frozen=True)
class Verdict:
    applies: bool
    denied: tuple[str, ...]  # messages of the failed validations

    @property
    def admitted(self) -> bool:
        return not self.denied


class Policy:
    """A ValidatingAdmissionPolicy's CEL, compiled once, evaluated like the API server."""

    def __init__(self, policy: Obj) -> None:
        self.env = celpy.Environment()
        spec = policy["spec"]
        self.conditions = [self._compile(c["expression"]) for c in spec["matchConditions"]]
        self.variables = [(v["name"], self._compile(v["expression"])) for v in spec["variables"]]
        self.validations = [
            (self._compile(v["expression"]), v["message"]) for v in spec["validations"]
        ]

    def _compile(self, expression: str) -> celpy.Runner:
        return self.env.program(self.env.compile(expression))

    @staticmethod
    def _true(program: celpy.Runner, activation: dict[str, Any]) -> bool:
        try:
            result = program.evaluate(activation)
        except CELEvalError:
            return False
        return isinstance(result, BoolType) and bool(result)

    def review(
        self,
        username: str,
        extra: Mapping[str, list[str]] | None,
        old: Obj | None,
        new: Obj | None,
        operation: str = "UPDATE",
    ) -> Verdict:
        """``old`` is None on CREATE, ``new`` on DELETE (the API server's null)."""
        user: dict[str, Any] = {"username": username}
        if extra is not None:
            user["extra"] = dict(extra)
        activation: dict[str, Any] = {
            "request": json_to_cel({"operation": operation, "userInfo": user}),
            "object": json_to_cel(new),
            "oldObject": json_to_cel(old),
        }
        if not all(self._true(c, activation) for c in self.conditions):
            return Verdict(applies=False, denied=())
        variables = MapType({})
        for name, program in self.variables:
            activation["variables"] = variables
            value: Any
            try:
                value = program.evaluate(activation)
            except CELEvalError as exc:  # the API server evaluates variables lazily
                value = exc
            variables = MapType({**variables, StringType(name): value})
        activation["variables"] = variables
        denied = tuple(
            msg for program, msg in self.validations if not self._true(program, activation)
        )
        return Verdict(applies=True, denied=denied)


def scc(objects: list[Obj]) -> Obj:
    return one(objects, "SecurityContextConstraints", "drain-guard")


def admitted_pod(objects: list[Obj], namespace: str | None = None) -> Obj:
    """The DaemonSet's pod as validating admission sees it: after the ServiceAccount admission
    plugin added the token volume and, on OpenShift, the SCC set its defaults (it runs as a
    mutating plugin, before any ValidatingAdmissionPolicy)."""
    daemonset = one(objects, "DaemonSet", "drain-guard")
    template = copy.deepcopy(daemonset["spec"]["template"])
    spec = template["spec"]
    spec["volumes"].append(
        {
            "name": "kube-api-access-x7k2p",
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt"}]}},
                ],
            },
        }
    )
    for container in spec["containers"]:
        container.setdefault("volumeMounts", []).append(
            {
                "name": "kube-api-access-x7k2p",
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": True,
            }
        )
    if any(o["kind"] == "SecurityContextConstraints" for o in objects):
        constraints = scc(objects)
        security = spec["securityContext"]
        security["fsGroup"] = constraints["fsGroup"]["ranges"][0]["min"]
        security["supplementalGroups"] = [constraints["supplementalGroups"]["ranges"][0]["min"]]
        security["seLinuxOptions"] = {"level": "s0:c27,c4"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "drain-guard-x7k2p",
            "namespace": namespace or daemonset["metadata"]["namespace"],
            "labels": template["metadata"]["labels"],
        },
        "spec": spec,
    }


class MatchConditions:
    """A webhook entry's matchConditions, evaluated as the API server does: all must be
    true for the webhook to be called. An evaluation error is an error here (the API server
    would apply the failurePolicy to it): the expressions must never fail."""

    def __init__(self, webhook: Obj) -> None:
        self.env = celpy.Environment()
        self.conditions = [
            (c["name"], self.env.program(self.env.compile(c["expression"])))
            for c in webhook["matchConditions"]
        ]

    def matches(
        self,
        username: str,
        old: Obj | None,
        new: Obj | None,
        operation: str = "UPDATE",
        resource: str = "nodes",
    ) -> bool:
        subject = new if new is not None else old
        namespace = ((subject or {}).get("metadata") or {}).get("namespace", "")
        activation: dict[str, Any] = {
            "request": json_to_cel(
                {
                    "operation": operation,
                    "resource": {"resource": resource},
                    "namespace": namespace,
                    "userInfo": {"username": username},
                }
            ),
            "object": json_to_cel(new),
            "oldObject": json_to_cel(old),
        }
        for name, program in self.conditions:
            result = program.evaluate(activation)
            assert isinstance(result, BoolType), (name, result)
            if not result:
                return False
        return True
