"""Field selectors as kube-apiserver reads them: apimachinery ``fields.ParseSelector``, then
the kind's field-label conversion (which fields of which kind may be selected on)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drain_guard_sim.apiserver import errors, labels
from drain_guard_sim.apiserver.resources import FIELD_ALIASES, ResourceType, field_value

_KIND_WITH_CONVERSION = {"Pod", "Node", "Event", "Namespace"}


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    equals: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.field) == self.value) == self.equals


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(f"{r.field}{'=' if r.equals else '!='}{r.value}" for r in self.requirements)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, cur, escaped = [], [], False
    for ch in text:
        if escaped:
            cur.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if escaped:
        cur.append("\\")
    parts.append("".join(cur))
    return parts


def _unescape(value: str) -> str:
    out, escaped = [], False
    for ch in value:
        if escaped:
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        else:
            out.append(ch)
    return "".join(out)


def parse_field_selector(text: str, rt: ResourceType) -> FieldSelector:
    """apimachinery ``fields.ParseSelector`` then the kind's field-label conversion."""
    if not text.strip():
        return FieldSelector()
    reqs: list[FieldRequirement] = []
    for part in _split_unescaped(text, ","):
        if part == "":
            continue
        found = _split_term(part)
        if found is None:
            raise errors.bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        label, equals, value = found
        label = FIELD_ALIASES.get((rt.kind, label), label)
        if label not in rt.fields and label not in ("source.component",):
            if rt.kind in _KIND_WITH_CONVERSION:
                raise errors.bad_request(f"field label not supported: {label}")
            raise errors.bad_request(
                f'"{label}" is not a known field selector: only "metadata.name", '
                f'"metadata.namespace"'
            )
        reqs.append(FieldRequirement(label, equals, value))
    return FieldSelector(tuple(reqs))


def _split_term(part: str) -> tuple[str, bool, str] | None:
    """``label!=value``, ``label==value`` or ``label=value`` → (label, equals, value)."""
    for op, equals in (("!=", False), ("==", True), ("=", True)):
        idx = _find_unescaped(part, op)
        if idx >= 0:
            return part[:idx].strip(), equals, _unescape(part[idx + len(op) :])
    return None


def _find_unescaped(text: str, token: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(token, i):
            return i
        i += 1
    return -1


def parse_labels(text: str | None) -> labels.Selector:
    try:
        return labels.parse(text)
    except labels.SelectorError as err:
        raise errors.bad_request(f"unable to parse requirement: {err}") from None


def parse_selectors(
    rt: ResourceType,
    label_selector: str | labels.Selector | None,
    field_selector: str | FieldSelector | None,
) -> tuple[labels.Selector, FieldSelector]:
    """The selectors of a list or watch, given as query text or already parsed."""
    selected = (
        label_selector
        if isinstance(label_selector, labels.Selector)
        else parse_labels(label_selector)
    )
    fields = (
        field_selector
        if isinstance(field_selector, FieldSelector)
        else parse_field_selector(field_selector or "", rt)
    )
    return selected, fields
