"""Names cut in the middle for tables and plot labels, never two shown alike."""

from __future__ import annotations

import pytest

from trtpipe.validate.short_names import ELLIPSIS, shorten, unique_short_names


def _keeps_both_ends(name: str, shown: str) -> bool:
    if ELLIPSIS not in shown:
        return shown == name
    start, end = shown.split(ELLIPSIS)[0], shown.split(ELLIPSIS)[-1]
    return name.startswith(start) and name.endswith(end)


def test_a_long_name_keeps_its_start_and_its_end():
    name = "/model/encoder/layer.11/attention/self/Softmax_output_0"
    shown = shorten(name, 28)
    assert len(shown) == 28 and shown.startswith("/model") and shown.endswith("Softmax_output_0")
    assert shorten("short", 28) == "short"


@pytest.mark.parametrize("names", [
    # differ near the start: the usual cut hides it
    [f"/model/encoder/layer.{i}/attention/output/dense/Add_output_0" for i in range(12)],
    # differ only deep in the middle: no cut shows the difference, numbers do
    [f"/a/{'x' * 40}{i}{'y' * 40}/out" for i in range(3)],
    # a short name equal to what a long one would be cut to
    ["/encoder/layer.0/attention/output/dense/Add_output_0", "/encoder/layer.1/attention/output/dense/Add_output_0",
     "out", "/model/decoder/Add_output_0"],
])
@pytest.mark.parametrize("width", [12, 28])
def test_shown_names_are_unique_and_within_the_width(names, width):
    shown = unique_short_names(names, width)
    assert set(shown) == set(names)
    assert len(set(shown.values())) == len(names)
    assert all(len(text) <= width for text in shown.values())
    numbered = [text for text in shown.values() if text.count(ELLIPSIS) == 2]
    assert all(_keeps_both_ends(name, text) for name, text in shown.items() if text not in numbered)


def test_the_cut_moves_only_for_names_that_collide():
    names = ["/encoder/layer.0/attention/output/dense/Add_output_0", "/encoder/layer.1/attention/output/dense/Add_output_0",
             "/decoder/something/else/entirely/Mul_output_0"]
    shown = unique_short_names(names, 28)
    assert shown[names[2]] == shorten(names[2], 28)
    assert "0" in shown[names[0]].split("/attention")[0] and "1" in shown[names[1]].split("/attention")[0]


def test_names_alike_in_two_groups_are_numbered_apart():
    """Two collision groups that no common cut separates were each numbered 1, 2: alike across groups."""
    names = ["/a_baba///aabbb/bb_b_/b/1b_a1b/ab_/1b_a1_output_0", "/a_baba///aabbb/bb_b_/b/1b_a1baab_/1b_a1_output_0",
             "/a_baba///aabbb/bb_b_/b/1b_a1baab_/1baa1_output_0", "/a_baba///aabbb/bb_b_/b/1__a1baab_/1baa1_output_0"]
    shown = unique_short_names(names, 19)
    assert len(set(shown.values())) == 4 and all(len(text) <= 19 for text in shown.values())
    assert all(_keeps_both_ends(name, text) for name, text in shown.items())


from hypothesis import example, given, settings, strategies as st  # noqa: E402

# Exporter names are alike at both ends: each name is one base name with a character or two changed.
@st.composite
def _names(draw):
    base = draw(st.text(alphabet="ab_/1", min_size=1, max_size=50))
    names = []
    for _ in range(draw(st.integers(min_value=1, max_value=12))):
        name = list(base)
        for _ in range(draw(st.integers(min_value=0, max_value=2))):
            name[draw(st.integers(min_value=0, max_value=len(base) - 1))] = draw(st.sampled_from("ab_/1"))
        names.append("".join(name))
    return names


_NAMES = _names()


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(names=_NAMES, width=st.integers(min_value=5, max_value=30))
@example(names=["111111111", "a111a1111", "a11111111", "1111a1111"], width=5)  # found by this test: two groups
def test_any_names_are_shown_unique_within_the_width_keeping_both_ends(names, width):
    shown = unique_short_names(names, width)
    assert set(shown) == set(names)
    assert len(set(shown.values())) == len(shown)
    assert all(len(text) <= width for text in shown.values())
    assert all(_keeps_both_ends(name, text) for name, text in shown.items())
    assert all(shown[name] == name for name in names if len(name) <= width)  # a name that fits is not cut
