"""Kubernetes label selectors and the build-pod selectors built on them (pure).

The grammar and validation follow Kubernetes' own (apimachinery ``labels.Parse`` and
``metav1.LabelSelectorAsSelector``), so a selector an operator already uses with ``oc get -l``
means the same thing here, and the simulator matches PodDisruptionBudgets the way the API
server does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

__all__ = [
    "DEFAULT_BUILD_POD_SELECTORS",
    "BuildPodSelector",
    "LabelSelector",
    "Op",
    "OwnerRef",
    "Requirement",
    "SelectorError",
    "default_build_pod_selectors",
    "parse_build_pod_selector",
    "parse_label_selector",
    "validate_label_key",
    "validate_label_value",
]


class SelectorError(ValueError):
    """A selector that Kubernetes would reject, with a message that says why."""


class Op(StrEnum):
    """Requirement operators; the values are how they are written."""

    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def validate_label_key(key: str) -> None:
    """Raise SelectorError unless ``key`` is a valid label key (``[prefix/]name``)."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            raise SelectorError(f"invalid label key {key!r}: prefix before '/' is empty")
        if len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix):
            raise SelectorError(
                f"invalid label key {key!r}: prefix must be a DNS subdomain "
                "(lowercase alphanumerics, '-' and '.', at most 253 characters)"
            )
    if not name:
        raise SelectorError(f"invalid label key {key!r}: name part is empty")
    if len(name) > 63 or not _NAME_RE.match(name):
        raise SelectorError(
            f"invalid label key {key!r}: name must be at most 63 characters of alphanumerics, "
            "'-', '_' or '.', starting and ending with an alphanumeric"
        )


def validate_label_value(value: str) -> None:
    """Raise SelectorError unless ``value`` is a valid label value (empty is valid)."""
    if value and (len(value) > 63 or not _NAME_RE.match(value)):
        raise SelectorError(
            f"invalid label value {value!r}: must be empty or at most 63 characters of "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        )


@dataclass(frozen=True)
class Requirement:
    """One ``key op values`` term; ``values`` is sorted and deduplicated."""

    key: str
    op: Op
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        validate_label_key(self.key)
        if self.op in (Op.EXISTS, Op.DOES_NOT_EXIST):
            if self.values:
                raise SelectorError(f"{self.key}: operator {self.op.name} takes no values")
        elif self.op in (Op.EQUALS, Op.NOT_EQUALS):
            if len(self.values) != 1:
                raise SelectorError(f"{self.key}: operator {self.op.value!r} takes exactly 1 value")
        elif not self.values:
            raise SelectorError(f"{self.key}: operator {self.op.value!r} needs at least 1 value")
        for value in self.values:
            validate_label_value(value)
        object.__setattr__(self, "values", tuple(sorted(set(self.values))))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes semantics: ``!=`` and ``notin`` also match when the key is absent."""
        present = self.key in labels
        if self.op is Op.EXISTS:
            return present
        if self.op is Op.DOES_NOT_EXIST:
            return not present
        if self.op in (Op.EQUALS, Op.IN):
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values

    def __str__(self) -> str:
        if self.op is Op.EXISTS:
            return self.key
        if self.op is Op.DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.op in (Op.EQUALS, Op.NOT_EQUALS):
            return f"{self.key}{self.op.value}{self.values[0]}"
        return f"{self.key} {self.op.value} ({','.join(self.values)})"


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements. No requirements matches everything; ``nothing`` none.

    ``nothing`` exists because Kubernetes treats a *missing* metav1.LabelSelector (for
    example a PodDisruptionBudget without ``spec.selector``) as matching no object at all.
    """

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when every requirement holds for ``labels``."""
        return not self.nothing and all(r.matches(labels) for r in self.requirements)

    def is_empty(self) -> bool:
        """True when the selector matches every object."""
        return not self.nothing and not self.requirements

    def positive(self) -> LabelSelector:
        """Only the requirements a pod meets by having labels (``=``, ``in``, exists): it
        matches every pod this one does, and every pod with more labels than one of those."""
        kept = (r for r in self.requirements if r.op in (Op.EQUALS, Op.IN, Op.EXISTS))
        return LabelSelector(tuple(kept), self.nothing)

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any] | None) -> LabelSelector:
        """Convert a metav1.LabelSelector (``matchLabels``/``matchExpressions``).

        ``None`` matches nothing and ``{}`` matches everything, as in Kubernetes.
        """
        if spec is None:
            return cls(nothing=True)
        requirements: list[Requirement] = []
        match_labels = spec.get("matchLabels") or {}
        if not isinstance(match_labels, Mapping):
            raise SelectorError("matchLabels must be a map of strings")
        for key, value in match_labels.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise SelectorError(f"matchLabels entry {key!r}: key and value must be strings")
            requirements.append(Requirement(key, Op.EQUALS, (value,)))
        expressions = spec.get("matchExpressions") or []
        if not isinstance(expressions, list):
            raise SelectorError("matchExpressions must be a list")
        for expression in expressions:
            requirements.append(_requirement_from_expression(expression))
        return cls(tuple(sorted(requirements, key=lambda r: r.key)))

    def __str__(self) -> str:
        if self.nothing:
            return "<nothing>"
        return ",".join(str(r) for r in self.requirements)


_EXPRESSION_OPS = {
    "In": Op.IN,
    "NotIn": Op.NOT_IN,
    "Exists": Op.EXISTS,
    "DoesNotExist": Op.DOES_NOT_EXIST,
}


def _requirement_from_expression(expression: Any) -> Requirement:
    if not isinstance(expression, Mapping):
        raise SelectorError(f"matchExpressions entry {expression!r} is not a map")
    key = expression.get("key")
    operator = expression.get("operator")
    values = expression.get("values") or []
    if not isinstance(key, str):
        raise SelectorError(f"matchExpressions entry {dict(expression)!r}: key must be a string")
    if operator not in _EXPRESSION_OPS:
        raise SelectorError(
            f"matchExpressions {key!r}: operator {operator!r} is not one of "
            f"{', '.join(_EXPRESSION_OPS)}"
        )
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SelectorError(f"matchExpressions {key!r}: values must be a list of strings")
    return Requirement(key, _EXPRESSION_OPS[operator], tuple(values))


# --- the string grammar ---------------------------------------------------------------

_SPECIAL = "=!(),<>"


def _tokenize(text: str) -> list[str]:
    """Split into operator tokens and identifiers, as the Kubernetes lexer does."""
    tokens: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in _SPECIAL:
            two = text[i : i + 2]
            if two in ("==", "!="):
                tokens.append(two)
                i += 2
            else:
                tokens.append(ch)
                i += 1
        else:
            start = i
            while i < len(text) and not text[i].isspace() and text[i] not in _SPECIAL:
                i += 1
            tokens.append(text[start:i])
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.pos += 1
        return token

    def fail(self, message: str) -> SelectorError:
        return SelectorError(f"label selector {self.text!r}: {message}")

    def identifier(self, what: str, *, value: bool = False) -> str:
        """Take an identifier; ``value`` reads ``in``/``notin`` as plain words."""
        token = self.take()
        keywords = ("==", "!=") if value else ("==", "!=", "in", "notin")
        if token is None or token in _SPECIAL or token in keywords:
            found = "end of input" if token is None else repr(token)
            raise self.fail(f"expected {what}, found {found}")
        return token

    def parse(self) -> LabelSelector:
        requirements: list[Requirement] = []
        if self.peek() is None:
            return LabelSelector()
        while True:
            requirements.append(self.requirement())
            token = self.take()
            if token is None:
                break
            if token != ",":
                raise self.fail(f"expected ',' or end of input, found {token!r}")
        return LabelSelector(tuple(sorted(requirements, key=lambda r: r.key)))

    def requirement(self) -> Requirement:
        try:
            return self._requirement()
        except SelectorError as err:
            if str(err).startswith("label selector "):
                raise
            raise self.fail(str(err)) from None

    def _requirement(self) -> Requirement:
        # A key may be spelt "in" or "notin": only where an operator is due are they keywords.
        if self.peek() == "!":
            self.take()
            key = self.identifier("a label key after '!'", value=True)
            return Requirement(key, Op.DOES_NOT_EXIST)
        key = self.identifier("a label key", value=True)
        token = self.peek()
        if token in (None, ","):
            return Requirement(key, Op.EXISTS)
        self.take()
        if token in ("=", "==", "!="):
            op = Op.NOT_EQUALS if token == "!=" else Op.EQUALS
            nxt = self.peek()
            if nxt in (None, ","):  # "k=" means the empty value, as in Kubernetes
                return Requirement(key, op, ("",))
            return Requirement(key, op, (self.identifier(f"a value after {token!r}", value=True),))
        if token in ("in", "notin"):
            return Requirement(key, Op.IN if token == "in" else Op.NOT_IN, self.value_set())
        if token in ("<", ">"):
            raise self.fail(f"operator {token!r} is not supported")
        raise self.fail(
            f"expected an operator (=, ==, !=, in, notin) after {key!r}, found {token!r}"
        )

    def value_set(self) -> tuple[str, ...]:
        token = self.take()
        if token != "(":
            raise self.fail(f"expected '(' after in/notin, found {token!r}")
        values: list[str] = []
        expect_value = True
        commas = 0  # commas in a row: apimachinery reads them in pairs, so an even run
        while True:  # just before ')' is an error there ("(,,)", "(a,,)")
            token = self.take()
            if token is None:
                raise self.fail("missing ')'")
            if token == ")":
                if commas and commas % 2 == 0:
                    raise self.fail("unexpected ')' after ',,' in value list")
                if expect_value:
                    values.append("")
                return tuple(values)
            if token == ",":
                if expect_value:
                    values.append("")
                expect_value = True
                commas += 1
                continue
            commas = 0
            if not expect_value or token in _SPECIAL or token in ("==", "!="):
                raise self.fail(f"unexpected {token!r} in value list")
            values.append(token)
            expect_value = False


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a label selector string (``a=b,c!=d,e in (f,g),h notin (i),j,!k``)."""
    return _Parser(text).parse()


# --- build-pod selectors ----------------------------------------------------------------


class OwnerRef(NamedTuple):
    """The part of a pod's ownerReference that selectors look at."""

    kind: str
    name: str


@dataclass(frozen=True)
class BuildPodSelector:
    """Which pods are build pods: an optional namespace, labels, and an optional owner.

    Text form: ``[NAMESPACE:]SELECTOR[@KIND[/NAME]]``. ``NAME`` ending in ``*`` is a prefix;
    ``@Job/build-*`` is how MCO 4.18+ build pods are told apart from other Jobs' pods, which
    carry the same kind of ``batch.kubernetes.io/job-name`` label.
    """

    selector: LabelSelector
    namespace: str | None = None
    owner_kind: str | None = None
    owner_name: str | None = None

    def matches(
        self, namespace: str, labels: Mapping[str, str], owners: Iterable[OwnerRef] = ()
    ) -> bool:
        """True when the pod is in the namespace (if any), matches, and has the owner."""
        if self.namespace is not None and namespace != self.namespace:
            return False
        if not self.selector.matches(labels):
            return False
        if self.owner_kind is None:
            return True
        return any(self._owner_matches(owner) for owner in owners)

    def _owner_matches(self, owner: OwnerRef) -> bool:
        if owner.kind != self.owner_kind:
            return False
        if self.owner_name is None:
            return True
        if self.owner_name.endswith("*"):
            return owner.name.startswith(self.owner_name[:-1])
        return owner.name == self.owner_name

    def __str__(self) -> str:
        text = str(self.selector)
        if self.namespace is not None:
            text = f"{self.namespace}:{text}"
        if self.owner_kind is not None:
            text += f"@{self.owner_kind}"
            if self.owner_name is not None:
                text += f"/{self.owner_name}"
        return text


_KIND_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def is_namespace_name(text: str) -> bool:
    """A valid namespace name (an RFC 1123 label)."""
    return len(text) <= 63 and bool(_DNS_LABEL_RE.match(text))


def parse_build_pod_selector(text: str) -> BuildPodSelector:
    """Parse ``[NAMESPACE:]SELECTOR[@KIND[/NAME]]``; an empty label selector is refused.

    Labels and namespaces cannot contain ``:`` or ``@``, so the split is unambiguous. A
    selector matching every pod would hold every drain until max-hold, hence the refusal.
    """
    rest = text.strip()
    owner_kind: str | None = None
    owner_name: str | None = None
    if "@" in rest:
        rest, _, owner = rest.partition("@")
        owner_kind, slash, name = owner.strip().partition("/")
        if not _KIND_RE.match(owner_kind):
            raise SelectorError(
                f"build-pod selector {text!r}: owner kind {owner_kind!r} must be a Kind such as Job"
            )
        if slash:
            stem = name.removesuffix("*")
            if not stem or "*" in stem or "/" in stem:
                raise SelectorError(
                    f"build-pod selector {text!r}: owner name {name!r} must be a name, "
                    "or a prefix ending in '*'"
                )
            owner_name = name
    namespace: str | None = None
    if ":" in rest:
        ns, _, rest = rest.partition(":")
        namespace = ns.strip()
        if not is_namespace_name(namespace):
            raise SelectorError(
                f"build-pod selector {text!r}: namespace {namespace!r} is not a valid "
                "namespace name"
            )
    try:
        selector = parse_label_selector(rest)
    except SelectorError as err:
        raise SelectorError(f"build-pod selector {text!r}: {err}") from None
    if selector.is_empty():
        raise SelectorError(
            f"build-pod selector {text!r}: the label selector is empty and would match every pod"
        )
    return BuildPodSelector(selector, namespace, owner_kind, owner_name)


MCO_NAMESPACE = "openshift-machine-config-operator"

DEFAULT_BUILD_POD_SELECTORS: tuple[str, ...] = (
    # 4.15 OpenShift Build mode (the seed's), and any ordinary OpenShift Build pod.
    "openshift.io/build.name",
    # 4.15 custom pod builder and 4.16.
    f"{MCO_NAMESPACE}:machineconfiguration.openshift.io/buildPod",
    # 4.17.
    f"{MCO_NAMESPACE}:machineconfiguration.openshift.io/on-cluster-layering",
    # 4.18+: pods of the Job build-<MachineOSBuild>.
    f"{MCO_NAMESPACE}:batch.kubernetes.io/job-name@Job/build-*",
)


def default_build_pod_selectors() -> tuple[BuildPodSelector, ...]:
    """The defaults, parsed: every MCO build-pod form (docs/protocol.md, MCO's side)."""
    return tuple(parse_build_pod_selector(text) for text in DEFAULT_BUILD_POD_SELECTORS)
