"""Label selectors as the kube-apiserver reads them (apimachinery ``labels.Parse`` and
``metav1.LabelSelectorAsSelector``).

The simulator has its own implementation, written from apimachinery's lexer and parser and not
shared with the agent: a selector bug in the agent must not be reproduced by the API server
that tests it. ``tests/sim/test_labels_agree.py`` compares the two on generated selectors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Selector", "SelectorError", "from_label_selector", "parse"]


class SelectorError(ValueError):
    """A selector the API server rejects with 400."""


# Label keys and values: apimachinery's IsQualifiedName and IsValidLabelValue.
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME_RE = re.compile(_NAME)
_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INTEGER_RE = re.compile(r"[+-]?[0-9]+")


def _check_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _SUBDOMAIN_RE.fullmatch(prefix)):
        raise SelectorError(f"{key}: prefix part must be a DNS-1123 subdomain")
    if not name or len(name) > 63 or not _NAME_RE.fullmatch(name):
        raise SelectorError(f"{key}: name part must be a qualified name of at most 63 characters")


def _check_value(value: str) -> None:
    if value and (len(value) > 63 or not _NAME_RE.fullmatch(value)):
        raise SelectorError(f"{value}: a valid label value is empty or a qualified name")


def _int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None."""
    if not _INTEGER_RE.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str
    values: frozenset[str]

    @classmethod
    def make(cls, key: str, op: str, values: frozenset[str]) -> _Requirement:
        """labels.NewRequirement: the value count each operator allows, then each value."""
        _check_key(key)
        if op in ("exists", "!") and values:
            raise SelectorError("values set must be empty for exists and does not exist")
        if op in ("=", "==", "!=") and len(values) != 1:
            raise SelectorError("exact-match compatibility requires one single value")
        if op in ("in", "notin") and not values:
            raise SelectorError("for 'in', 'notin' operators, values set can't be empty")
        if op in ("gt", "lt") and (len(values) != 1 or any(_int64(v) is None for v in values)):
            raise SelectorError("for 'Gt', 'Lt' operators, exactly one integer value")
        for value in values:
            _check_value(value)
        return cls(key, op, values)

    def holds(self, labels: Mapping[str, str]) -> bool:
        """labels.Requirement.Matches: ``!=`` and ``notin`` also hold when the key is absent;
        ``gt``/``lt`` hold only for integer label values."""
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "==", "in"):
            return present and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        have = _int64(labels[self.key]) if present else None
        (want,) = (_int64(v) for v in self.values)
        if have is None or want is None:
            return False
        return have > want if self.op == "gt" else have < want


@dataclass(frozen=True)
class Selector:
    """All requirements must hold. ``nothing`` is a nil metav1.LabelSelector: matches none."""

    requirements: tuple[_Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.nothing and all(r.holds(labels) for r in self.requirements)

    @property
    def everything(self) -> bool:
        return not self.nothing and not self.requirements


# --- the string form: apimachinery's lexer, then its parser -------------------------------

_TOKEN_RE = re.compile(r"[ \t\r\n]*(?:(?P<op>==|!=|[=!(),<>])|(?P<word>[^ \t\r\n=!(),<>]+))")
_OPERATORS = {"=": "=", "==": "==", "!=": "!=", "in": "in", "notin": "notin", ">": "gt", "<": "lt"}


def _lex(text: str) -> list[tuple[str, str]]:
    """(kind, literal) pairs; kind is the literal for symbols, "id" for words, "end" last."""
    tokens: list[tuple[str, str]] = []
    for match in _TOKEN_RE.finditer(text):
        op, word = match.group("op"), match.group("word")
        tokens.append((op, op) if op else ("id", word))
    tokens.append(("end", ""))
    return tokens


class _Reader:
    """Keywords (in, notin) are keywords only where an operator may stand, as in
    apimachinery, which reads everything else in its Values mode."""

    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.at = 0

    def next_is(self, *kinds: str) -> bool:
        return self.tokens[self.at][0] in kinds

    def take(self) -> tuple[str, str]:
        token = self.tokens[self.at]
        self.at = min(self.at + 1, len(self.tokens) - 1)
        return token

    def selector(self) -> Selector:
        found: list[_Requirement] = []
        while not self.next_is("end"):
            if not self.next_is("id", "!"):
                raise SelectorError(f"found '{self.take()[1]}', expected: !, identifier")
            found.append(self.requirement())
            kind, literal = self.take()
            if kind == ",":
                if not self.next_is("id", "!"):
                    raise SelectorError(f"found '{self.take()[1]}', expected: identifier after ','")
            elif kind != "end":
                raise SelectorError(f"found '{literal}', expected: ',' or 'end of string'")
            else:
                break
        return Selector(tuple(found))

    def requirement(self) -> _Requirement:
        negated = self.next_is("!")
        if negated:
            self.take()
        kind, key = self.take()
        if kind != "id":
            raise SelectorError(f"found '{key}', expected: identifier")
        _check_key(key)
        if negated or self.next_is(",", "end"):
            return _Requirement.make(key, "!" if negated else "exists", frozenset())
        kind, literal = self.take()
        op = _OPERATORS.get(literal) if kind in ("id", "=", "==", "!=", "<", ">") else None
        if op is None:
            raise SelectorError(f"found '{literal}', expected: operator")
        values = self.value_set() if op in ("in", "notin") else self.exact_value()
        return _Requirement.make(key, op, values)

    def exact_value(self) -> frozenset[str]:
        if self.next_is(",", "end"):
            return frozenset({""})
        kind, literal = self.take()
        if kind != "id":
            raise SelectorError(f"found '{literal}', expected: identifier")
        return frozenset({literal})

    def value_set(self) -> frozenset[str]:
        """parseValues: empty slots between commas are "", with apimachinery's quirks kept
        (``(,,)`` is an error, ``(,,,)`` is not)."""
        kind, literal = self.take()
        if kind != "(":
            raise SelectorError(f"found '{literal}', expected: '('")
        if self.next_is(")"):
            self.take()
            return frozenset({""})
        values: set[str] = set()
        while True:
            kind, literal = self.take()
            if kind == "id":
                values.add(literal)
                if self.next_is(","):
                    continue
                kind, literal = self.take()
                if kind != ")":
                    raise SelectorError(f"found '{literal}', expected: ',' or ')'")
                return frozenset(values)
            if kind != ",":
                raise SelectorError(f"found '{literal}', expected: ',', or identifier")
            if not values:
                values.add("")
            if self.next_is(")"):
                self.take()
                return frozenset(values | {""})
            if self.next_is(","):
                self.take()
                values.add("")


def parse(text: str | None) -> Selector:
    """A ``labelSelector`` query parameter; empty or absent selects everything."""
    return _Reader(text or "").selector()


# --- the object form ------------------------------------------------------------------------

_EXPRESSION_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def from_label_selector(spec: Mapping[str, Any] | None) -> Selector:
    """metav1.LabelSelectorAsSelector: nil selects nothing, ``{}`` everything."""
    if spec is None:
        return Selector(nothing=True)
    found: list[_Requirement] = []
    match_labels = spec.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("matchLabels: must be a map")
    for key, value in match_labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise SelectorError(f"matchLabels[{key!r}]: must be a string")
        found.append(_Requirement.make(key, "=", frozenset({value})))
    expressions = spec.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError("matchExpressions: must be a list")
    for expression in expressions:
        if not isinstance(expression, Mapping):
            raise SelectorError("matchExpressions: each entry must be a map")
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if not isinstance(key, str):
            raise SelectorError("matchExpressions: key must be a string")
        if operator not in _EXPRESSION_OPERATORS:
            raise SelectorError(f"{operator!r} is not a valid label selector operator")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"matchExpressions {key}: values must be strings")
        found.append(_Requirement.make(key, _EXPRESSION_OPERATORS[operator], frozenset(values)))
    return Selector(tuple(found))


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    meta = obj.get("metadata") or {}
    found = meta.get("labels") or {}
    return found if isinstance(found, Mapping) else {}
