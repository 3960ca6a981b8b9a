"""The simulator's label selectors where the kube-apiserver's differ from what the agent needs."""

from __future__ import annotations

import pytest

from drain_guard_sim.apiserver import labels


@pytest.mark.parametrize(
    ("text", "have", "expected"),
    [
        ("n>3", {"n": "4"}, True),
        ("n>3", {"n": "3"}, False),
        ("n<3", {"n": "-9"}, True),
        ("n<3", {"n": "x"}, False),  # not an integer: no match, as apimachinery
        ("n<3", {}, False),
        ("in=1", {"in": "1"}, True),  # "in" is a keyword only where an operator is due
        ("a notin (,,,)", {"a": ""}, False),
        ("a notin (,,,)", {"a": "b"}, True),
    ],
)
def test_parses_and_matches_like_apimachinery(
    text: str, have: dict[str, str], expected: bool
) -> None:
    assert labels.parse(text).matches(have) is expected


@pytest.mark.parametrize("text", ["n>x", "n>1,", "a in (,,)", "a in (b c)", ",a", "a=(b)"])
def test_rejects_what_apimachinery_rejects(text: str) -> None:
    with pytest.raises(labels.SelectorError):
        labels.parse(text)


def test_nil_selects_nothing_and_empty_everything() -> None:
    assert not labels.from_label_selector(None).matches({})
    assert labels.from_label_selector({}).everything
