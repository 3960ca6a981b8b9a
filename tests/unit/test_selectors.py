"""Label selectors and build-pod selectors: Kubernetes grammar, validation and matching."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drain_guard.core.selectors import (
    DEFAULT_BUILD_POD_SELECTORS,
    LabelSelector,
    Op,
    OwnerRef,
    Requirement,
    SelectorError,
    default_build_pod_selectors,
    parse_build_pod_selector,
    parse_label_selector,
)

MCO_NS = "openshift-machine-config-operator"


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "b"}, True),
        ("a=b", {"a": "c"}, False),
        ("a=b", {}, False),
        ("a!=b", {"a": "c"}, True),
        ("a!=b", {}, True),
        ("a!=b", {"a": "b"}, False),
        ("a in (x, y)", {"a": "y"}, True),
        ("a in (x,y)", {"a": "z"}, False),
        ("a in (x,y)", {}, False),
        ("a notin (x,y)", {"a": "z"}, True),
        ("a notin (x,y)", {}, True),
        ("a notin (x,y)", {"a": "x"}, False),
        ("a", {"a": ""}, True),
        ("a", {"b": "a"}, False),
        ("!a", {"b": "a"}, True),
        ("!a", {"a": "x"}, False),
        ("a=b, c , !d", {"a": "b", "c": "1"}, True),
        ("a=b,c,!d", {"a": "b", "c": "1", "d": "2"}, False),
        ("a=", {"a": ""}, True),
        ("a=", {"a": "x"}, False),
        ("a==", {"a": ""}, True),
        ("a in ()", {"a": ""}, True),
        ("a in (x,)", {"a": ""}, True),
        ("a=in,b in (notin)", {"a": "in", "b": "notin"}, True),
        ("", {"anything": "x"}, True),
        ("   ", {}, True),
        ("example.com/role=builder", {"example.com/role": "builder"}, True),
    ],
)
def test_parse_and_match(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(text).matches(labels) is expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a=b=c", "expected ',' or end of input"),
        ("a in x", "expected '('"),
        ("a in (x", "missing ')'"),
        ("a in (x y)", "unexpected 'y'"),
        ("a b", "expected an operator"),
        ("a>1", "not supported"),
        ("!", "expected a label key after '!'"),
        ("a=b,", "expected a label key, found end of input"),
        (",a", "expected a label key, found ','"),
        ("-a=b", "invalid label key"),
        ("a=-b", "invalid label value"),
        ("a=" + "x" * 64, "invalid label value"),
        ("k" * 64, "name must be at most 63"),
        ("Example.com/a", "prefix must be a DNS subdomain"),
        ("/a", "prefix before '/' is empty"),
        ("ex.com/", "name part is empty"),
        ("a=(b)", "expected a value"),
        ("a in=b", "expected '(' after in/notin"),
    ],
)
def test_parse_errors_are_clear(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError, match="label selector") as info:
        parse_label_selector(text)
    assert fragment in str(info.value)


def test_selector_error_is_value_error() -> None:
    with pytest.raises(ValueError, match="invalid label key"):
        parse_label_selector("-bad")


def test_requirement_arity_is_validated() -> None:
    with pytest.raises(SelectorError, match="exactly 1 value"):
        Requirement("a", Op.EQUALS, ("x", "y"))
    with pytest.raises(SelectorError, match="at least 1 value"):
        Requirement("a", Op.IN, ())
    with pytest.raises(SelectorError, match="takes no values"):
        Requirement("a", Op.EXISTS, ("x",))


def test_str_is_canonical() -> None:
    selector = parse_label_selector("z in (b, a, a), !y, x!=1,w")
    assert str(selector) == "w,x!=1,!y,z in (a,b)"


def test_from_dict_match_labels_and_expressions() -> None:
    selector = LabelSelector.from_dict(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "owner", "operator": "Exists"},
            ],
        }
    )
    assert selector.matches({"app": "web", "tier": "a", "owner": "x"})
    assert not selector.matches({"app": "web", "tier": "a", "owner": "x", "canary": "1"})
    assert not selector.matches({"app": "web", "tier": "c", "owner": "x"})
    assert not selector.matches({"app": "web", "tier": "a", "owner": "x", "env": "prod"})
    assert not selector.matches({"app": "db", "tier": "a", "owner": "x"})


def test_from_dict_none_matches_nothing_empty_matches_everything() -> None:
    assert not LabelSelector.from_dict(None).matches({})
    assert not LabelSelector.from_dict(None).matches({"a": "b"})
    assert LabelSelector.from_dict({}).matches({"a": "b"})
    assert LabelSelector.from_dict({"matchLabels": {}}).is_empty()


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]}, "operator"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "at least 1 value"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "no values"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "key must be a string"),
        ({"matchExpressions": "a"}, "must be a list"),
        ({"matchExpressions": ["a"]}, "is not a map"),
        ({"matchLabels": {"a": 1}}, "must be strings"),
        ({"matchLabels": ["a"]}, "map of strings"),
        ({"matchLabels": {"a": "-x"}}, "invalid label value"),
    ],
)
def test_from_dict_errors(spec: dict[str, object], fragment: str) -> None:
    with pytest.raises(SelectorError, match=fragment):
        LabelSelector.from_dict(spec)


# --- build-pod selectors -----------------------------------------------------------------


def test_build_pod_selector_namespace_and_owner() -> None:
    sel = parse_build_pod_selector(f"{MCO_NS}:batch.kubernetes.io/job-name@Job/build-*")
    labels = {"batch.kubernetes.io/job-name": "build-worker-abc"}
    assert sel.matches(MCO_NS, labels, [OwnerRef("Job", "build-worker-abc")])
    assert not sel.matches("default", labels, [OwnerRef("Job", "build-worker-abc")])
    assert not sel.matches(MCO_NS, labels, [OwnerRef("Job", "collect-profiles-1")])
    assert not sel.matches(MCO_NS, labels, [OwnerRef("CronJob", "build-x")])
    assert not sel.matches(MCO_NS, labels, [])
    assert not sel.matches(MCO_NS, {}, [OwnerRef("Job", "build-worker-abc")])
    assert str(sel) == f"{MCO_NS}:batch.kubernetes.io/job-name@Job/build-*"


def test_build_pod_selector_exact_owner_and_any_name() -> None:
    exact = parse_build_pod_selector("a@Job/build-x")
    assert exact.matches("ns", {"a": ""}, [OwnerRef("Job", "build-x")])
    assert not exact.matches("ns", {"a": ""}, [OwnerRef("Job", "build-xy")])
    any_name = parse_build_pod_selector("a @ Job")
    assert any_name.matches("ns", {"a": ""}, [OwnerRef("ReplicaSet", "r"), OwnerRef("Job", "j")])


def test_build_pod_selector_without_namespace_matches_any_namespace() -> None:
    sel = parse_build_pod_selector("openshift.io/build.name")
    assert sel.namespace is None
    assert sel.matches("my-app", {"openshift.io/build.name": "b-1"})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty and would match every pod"),
        (f"{MCO_NS}:", "empty and would match every pod"),
        ("Bad_NS:a", "not a valid namespace"),
        ("a@job", "must be a Kind"),
        ("a@Job/", "must be a name, or a prefix"),
        ("a@Job/b*c*", "must be a name, or a prefix"),
        ("ns:a in (", "missing ')'"),
    ],
)
def test_build_pod_selector_errors(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError, match="build-pod selector") as info:
        parse_build_pod_selector(text)
    assert fragment in str(info.value)


# Pods as each MCO version creates them (docs/protocol.md, MCO's side), and pods that are not
# builds.
_MCO_BUILD_PODS = [
    ("4.15 build", MCO_NS, {"openshift.io/build.name": "build-rendered-worker-1"}, []),
    (
        "4.16",
        MCO_NS,
        {
            "machineconfiguration.openshift.io/buildPod": "",
            "machineconfiguration.openshift.io/targetMachineConfigPool": "worker",
        },
        [],
    ),
    ("4.17", MCO_NS, {"machineconfiguration.openshift.io/on-cluster-layering": ""}, []),
    (
        "4.18",
        MCO_NS,
        {"batch.kubernetes.io/job-name": "build-worker-1a2b"},
        [OwnerRef("Job", "build-worker-1a2b")],
    ),
    ("app build", "my-app", {"openshift.io/build.name": "web-3"}, []),
]
_NOT_BUILD_PODS = [
    ("mob", MCO_NS, {"k8s-app": "machine-os-builder"}, []),
    (
        "other job",
        MCO_NS,
        {"batch.kubernetes.io/job-name": "collect-profiles-1"},
        [OwnerRef("Job", "collect-profiles-1")],
    ),
    (
        "job elsewhere",
        "default",
        {"batch.kubernetes.io/job-name": "build-x"},
        [OwnerRef("Job", "build-x")],
    ),
    ("4.16 label elsewhere", "default", {"machineconfiguration.openshift.io/buildPod": ""}, []),
]


@pytest.mark.parametrize(
    ("case", "namespace", "labels", "owners"), _MCO_BUILD_PODS + _NOT_BUILD_PODS
)
def test_defaults_cover_every_mco_version(
    case: str, namespace: str, labels: dict[str, str], owners: list[OwnerRef]
) -> None:
    expected = any(case == c for c, *_ in _MCO_BUILD_PODS)
    selectors = default_build_pod_selectors()
    assert len(selectors) == len(DEFAULT_BUILD_POD_SELECTORS)
    assert any(s.matches(namespace, labels, owners) for s in selectors) is expected


# --- hypothesis: the grammar round-trips and matching agrees with a direct model ------------

_name = st.from_regex(r"[a-z0-9]([-a-z0-9_.]{0,8}[a-z0-9])?", fullmatch=True)
_prefix = st.from_regex(r"[a-z0-9]{1,5}(\.[a-z0-9]{1,5}){0,2}", fullmatch=True)
# "in" and "notin" are keywords where a key is due, in Kubernetes' grammar as here.
_key = st.one_of(_name, st.builds(lambda p, n: f"{p}/{n}", _prefix, _name)).filter(
    lambda k: k not in ("in", "notin")
)
_value = st.one_of(st.just(""), _name)


@st.composite
def _requirements(draw: st.DrawFn) -> Requirement:
    op = draw(st.sampled_from(list(Op)))
    key = draw(_key)
    if op in (Op.EXISTS, Op.DOES_NOT_EXIST):
        return Requirement(key, op)
    if op in (Op.EQUALS, Op.NOT_EQUALS):
        return Requirement(key, op, (draw(_value),))
    return Requirement(key, op, tuple(draw(st.lists(_value, min_size=1, max_size=3))))


@given(st.lists(_requirements(), max_size=5))
def test_str_round_trips(requirements: list[Requirement]) -> None:
    selector = LabelSelector(tuple(sorted(requirements, key=lambda r: r.key)))
    assert parse_label_selector(str(selector)) == selector


@given(
    st.lists(_requirements(), max_size=4),
    st.dictionaries(_key, _value, max_size=4),
)
def test_matches_is_the_conjunction(
    requirements: list[Requirement], labels: dict[str, str]
) -> None:
    text = ",".join(str(r) for r in requirements)
    selector = parse_label_selector(text)

    def model(r: Requirement) -> bool:
        value = labels.get(r.key)
        if r.op is Op.EXISTS:
            return value is not None
        if r.op is Op.DOES_NOT_EXIST:
            return value is None
        if r.op in (Op.EQUALS, Op.IN):
            return value in r.values
        return value not in r.values

    assert selector.matches(labels) == all(model(r) for r in requirements)


@given(st.text(alphabet="ab=!(),in ot/.-", max_size=30) | st.text(max_size=20))
def test_any_text_parses_to_a_stable_selector_or_fails_cleanly(text: str) -> None:
    """Only SelectorError escapes, and whatever parses prints back to the same selector."""
    try:
        selector = parse_label_selector(text)
    except SelectorError:
        return
    assert parse_label_selector(str(selector)) == selector


def test_in_and_notin_are_label_keys_where_no_operator_is_due() -> None:
    """apimachinery reads keys in its values mode: ``in=a`` selects label ``in``."""
    assert parse_label_selector("in=a").matches({"in": "a"})
    assert parse_label_selector("!notin").matches({})


def test_commas_before_a_closing_parenthesis_are_read_in_pairs_as_apimachinery_does() -> None:
    """Found by tests/sim/test_labels_agree.py: "(,,)" was accepted, Kubernetes rejects it."""
    for text in ("a in (,,)", "a in (b,,)"):
        with pytest.raises(SelectorError, match="after ',,'"):
            parse_label_selector(text)
    assert parse_label_selector("a in (,,,)").matches({"a": ""})


def test_the_positive_part_keeps_only_the_terms_met_by_having_labels() -> None:
    selector = parse_label_selector("a=1,b in (x,y),c,!d,e!=2,f notin (z)")
    assert str(selector.positive()) == "a=1,b in (x,y),c"
    wider = selector.positive()
    assert wider.matches({"a": "1", "b": "x", "c": "", "d": "", "e": "2"})
    assert not selector.matches({"a": "1", "b": "x", "c": "", "d": ""})
