"""The simulator's label selectors and the agent's, written apart, agree.

Each side is its own reading of apimachinery's grammar; a bug in one shows up here as a
disagreement instead of being reproduced by the API server that tests the other. The agent
deliberately refuses the numeric ``<``/``>`` operators (no build pod is selected by number),
so the generated selectors leave them out; the simulator's own tests cover them.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from drain_guard.core import selectors as agent_side
from drain_guard_sim.apiserver import labels as sim_side

KEYS = ["a", "b", "in", "notin", "x.io/k", "x.io/", "/k", "-a", "a" * 64, "k8s.io/a_b.c"]
VALUES = ["", "1", "v", "in", "v-1", "-v", "v" * 64, "a_b.c"]
WORDS = [*KEYS, *VALUES, "=", "==", "!=", "!", "(", ")", ",", " ", "in", "notin"]


@st.composite
def selector_texts(draw: st.DrawFn) -> str:
    """Mostly well-formed requirements, with some token soup to probe the error paths."""

    def requirement() -> str:
        key = draw(st.sampled_from(KEYS))
        form = draw(st.sampled_from(["exists", "not", "eq", "set"]))
        if form == "exists":
            return key
        if form == "not":
            return "!" + key
        if form == "eq":
            op = draw(st.sampled_from(["=", "==", "!="]))
            return f"{key}{op}{draw(st.sampled_from(VALUES))}"
        op = draw(st.sampled_from(["in", "notin"]))
        values = draw(st.lists(st.sampled_from(VALUES), max_size=4))
        return f"{key} {op} ({','.join(values)})"

    if draw(st.booleans()):
        return " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=8)))
    return ",".join(requirement() for _ in range(draw(st.integers(0, 3))))


label_sets = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4)


@settings(max_examples=600, deadline=None)
@given(selector_texts(), st.lists(label_sets, min_size=1, max_size=4))
def test_strings_are_read_alike(text: str, label_maps: list[dict[str, str]]) -> None:
    try:
        ours = agent_side.parse_label_selector(text)
    except agent_side.SelectorError:
        ours = None
    try:
        theirs = sim_side.parse(text)
    except sim_side.SelectorError:
        theirs = None
    assert (ours is None) == (theirs is None), (text, ours, theirs)
    if ours is not None and theirs is not None:
        for labels in label_maps:
            assert ours.matches(labels) == theirs.matches(labels), (text, labels)


expressions = st.fixed_dictionaries(
    {
        "key": st.sampled_from(KEYS),
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt"]),
        "values": st.lists(st.sampled_from(VALUES), max_size=3),
    }
)
objects = st.none() | st.fixed_dictionaries(
    {},
    optional={
        "matchLabels": st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES)),
        "matchExpressions": st.lists(expressions, max_size=3),
    },
)


@settings(max_examples=400, deadline=None)
@given(objects, st.lists(label_sets, min_size=1, max_size=4))
def test_label_selector_objects_are_read_alike(
    spec: dict[str, Any] | None, label_maps: list[dict[str, str]]
) -> None:
    try:
        ours = agent_side.LabelSelector.from_dict(spec)
    except agent_side.SelectorError:
        ours = None
    try:
        theirs = sim_side.from_label_selector(spec)
    except sim_side.SelectorError:
        theirs = None
    assert (ours is None) == (theirs is None), (spec, ours, theirs)
    if ours is not None and theirs is not None:
        for labels in label_maps:
            assert ours.matches(labels) == theirs.matches(labels), (spec, labels)
