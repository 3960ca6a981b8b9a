"""Fault injection for the simulated API server, switched on and off by tests at run time.

A fault matches requests by user, verb (kube-audit verbs: get, list, watch, create, update,
patch, delete, deletecollection) and resource (``pods``, ``pods/eviction``, ``nodes/status``,
``poddisruptionbudgets.policy``; ``None`` matches any), fires with a probability drawn from a
seeded RNG, and optionally only a number of times.

Kinds: added latency; an error reply (500, 429 with Retry-After, 503, ...); forcing the next
watch(es) to get the ``410 Expired`` ERROR event. Cutting open watch streams is an action,
not a rule: ``SimApiServer.cut_watches()``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from drain_guard_sim.apiserver import errors


class FaultKind(StrEnum):
    LATENCY = "latency"
    ERROR = "error"
    WATCH_EXPIRED = "watch-410"


#: The replies a real server gives with these codes: (reason, message).
_RETRYABLE_REPLIES = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
    504: ("Timeout", "Timeout: request did not complete within the allotted timeout"),
}


@dataclass(eq=False)
class Fault:
    kind: FaultKind
    user: str | None = None
    verb: str | None = None
    resource: str | None = None
    probability: float = 1.0
    times: int | None = None  # None: unlimited; fires at most this many more times
    latency: float = 0.0
    status: int = 500
    retry_after: int | None = None
    message: str | None = None
    fired: int = 0

    def matches(self, user: str, verb: str, resource: str) -> bool:
        if self.user is not None and self.user != user:
            return False
        if self.verb is not None and self.verb != verb:
            return False
        # "pods" does not match "pods/eviction" or "pods/status": name the subresource.
        return self.resource is None or self.resource == resource

    def error(self) -> errors.ApiError:
        """The reply a real server (or the load balancer in front of it) would give."""
        code = self.status
        retry = self.retry_after
        if code in _RETRYABLE_REPLIES:
            reason, default = _RETRYABLE_REPLIES[code]
            err = errors.ApiError(
                errors.status_obj(
                    code,
                    reason,
                    self.message or default,
                    {"retryAfterSeconds": retry} if retry else {},
                )
            )
        elif code >= 500:
            err = errors.internal_error(self.message or "injected fault")
        else:
            err = errors.ApiError(
                errors.status_obj(code, "Unknown", self.message or f"injected fault ({code})")
            )
        if retry:
            err.headers["Retry-After"] = str(retry)
        return err


class Faults:
    """The active fault rules; decisions use one seeded RNG so a failing run replays."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self._rules: list[Fault] = []

    def seed(self, seed: int) -> None:
        self.rng.seed(seed)

    @property
    def rules(self) -> tuple[Fault, ...]:
        return tuple(self._rules)

    def add(self, fault: Fault) -> Fault:
        self._rules.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        if fault in self._rules:
            self._rules.remove(fault)

    def clear(self) -> None:
        self._rules.clear()

    def latency(
        self,
        seconds: float,
        *,
        user: str | None = None,
        verb: str | None = None,
        resource: str | None = None,
        probability: float = 1.0,
        times: int | None = None,
    ) -> Fault:
        return self.add(
            Fault(FaultKind.LATENCY, user, verb, resource, probability, times, latency=seconds)
        )

    def error(
        self,
        status: int = 500,
        *,
        retry_after: int | None = None,
        message: str | None = None,
        user: str | None = None,
        verb: str | None = None,
        resource: str | None = None,
        probability: float = 1.0,
        times: int | None = None,
    ) -> Fault:
        return self.add(
            Fault(
                FaultKind.ERROR,
                user,
                verb,
                resource,
                probability,
                times,
                status=status,
                retry_after=retry_after,
                message=message,
            )
        )

    def expire_watches(
        self,
        times: int | None = 1,
        *,
        user: str | None = None,
        resource: str | None = None,
        probability: float = 1.0,
    ) -> Fault:
        """The next ``times`` matching watches that carry a resourceVersion get a 410."""
        return self.add(Fault(FaultKind.WATCH_EXPIRED, user, "watch", resource, probability, times))

    def fire(self, kind: FaultKind, user: str, verb: str, resource: str) -> list[Fault]:
        """The rules of ``kind`` that fire for this request (counting them as fired)."""
        fired: list[Fault] = []
        for rule in list(self._rules):
            if rule.kind != kind or not rule.matches(user, verb, resource):
                continue
            if rule.probability < 1.0 and self.rng.random() >= rule.probability:
                continue
            rule.fired += 1
            if rule.times is not None:
                rule.times -= 1
                if rule.times <= 0:
                    self._rules.remove(rule)
            fired.append(rule)
        return fired
