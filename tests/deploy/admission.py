"""A ValidatingAdmissionPolicy evaluated as the API server does, with cel-python.

cel-python implements standard CEL; the policies use only standard CEL (``has``, ``in``,
``all``, ``filter``, ``startsWith``, ``size``, the conditional), not the Kubernetes CEL
libraries, so the interpreter sees what the API server would. Evaluation follows the API
server: a false or failing match condition means the policy does not apply; variables are
evaluated in order (lazily there: an error is kept and only fails what reads it); every
validation must yield true, and an evaluation error denies (``failurePolicy: Fail``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy.adapter import json_to_cel
from celpy.celtypes import BoolType, MapType, StringType
from celpy.evaluation import CELEvalError

from tests.deploy.tools import Obj


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
