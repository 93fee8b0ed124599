"""Positions where the reference is inf/NaN: counted, and the candidate must hold the same value."""

from __future__ import annotations

import numpy as np

from trtpipe.numerics.metrics import OutputMetrics
from trtpipe.validate.compare import compare_candidate, reference_nonfinite_notes

INF, NAN = np.inf, np.nan


def verdict(reference, candidate):
    ref = {"y": np.array(reference, np.float32)}
    cand = {"y": np.array(candidate, np.float32)}
    return compare_candidate("emulated", [ref], [cand], ["y"])


def test_same_non_finite_values_pass_with_a_note():
    judged = verdict([1.0, INF, -INF, NAN], [1.0, INF, -INF, NAN])
    metrics = judged.outputs["y"].metrics
    assert judged.passed and (metrics.ref_nonfinite, metrics.ref_nonfinite_mismatch) == (3, 0)
    assert reference_nonfinite_notes(judged) == [
        "candidate emulated, output y: the reference is inf/NaN at 3 position(s), left out of the metrics; "
        "the candidate holds the same value at 3 of them"]


def test_another_value_where_the_reference_is_non_finite_fails():
    for candidate in ([1.0, -INF, -INF, NAN], [1.0, INF, -INF, 0.0], [1.0, NAN, -INF, NAN], [1.0, 6e4, -INF, NAN]):
        judged = verdict([1.0, INF, -INF, NAN], candidate)
        assert not judged.passed, candidate
        assert judged.outputs["y"].metrics.ref_nonfinite_mismatch == 1
        assert "ref_nonfinite_mismatch 1" in judged.reasons[0]
        assert reference_nonfinite_notes(judged)[0].endswith("at 2 of them (FAIL)")


def test_a_finite_reference_has_no_note_and_old_reports_still_load():
    judged = verdict([1.0, 2.0], [1.0, 2.0])
    assert judged.passed and reference_nonfinite_notes(judged) == []
    old = {k: v for k, v in judged.outputs["y"].metrics.to_json().items() if not k.startswith("ref_")}
    assert OutputMetrics.from_json(old).ref_nonfinite == 0
