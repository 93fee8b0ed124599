"""Loop bodies cast invariants once (issue 21, item 6).

A Loop/Scan body that reads an outer-scope value (a weight, or an activation the
enclosing graph computed before the loop) in another type than the enclosing graph
holds it gets it converted once, outside the body; the plan counts Casts once and
per step.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from tests.precision.graphs import element_types, run
from tests.precision.loop_invariant_graphs import loop_decoder, nested_decoder, scan_decoder
from tests.precision.subgraph_graphs import feeds_for
from tests.precision.test_stored_tensors import run_stage
from tests.precision.test_subgraphs import body, planned
from trtpipe.numerics.emulator import EmulatedRunner

FP16 = TensorProto.FLOAT16
ENCODER_FP32 = {"encoder": {"match": "regex", "pattern": "encoder/.*", "precision": "fp32"}}
FP16_TOLERANCE = {"rtol": 1e-2, "atol": 1e-2}


def _casts(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    return [node for node in graph.node if node.op_type == "Cast"]


def _body_reads_from_outer(graph: onnx.GraphProto) -> set[str]:
    local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    local |= {name for node in graph.node for name in node.output}
    return {name for node in graph.node for name in node.input if name and name not in local}


def _body_of(graph: onnx.GraphProto, control: str, attribute: str = "body") -> onnx.GraphProto:
    node = next(n for n in graph.node if n.name == control)
    return next(a.g for a in node.attribute if a.name == attribute)


def _decoder(make):
    model = make()
    return model, feeds_for(model, seed=3, sizes={"steps": 7})


@pytest.mark.parametrize("make", [loop_decoder, scan_decoder])
def test_a_loop_invariant_is_cast_once_outside_the_body(make):
    model, feeds = _decoder(make)
    _, decisions, document, mixed = planned(model, feeds, rules=ENCODER_FP32, auto={"max_abs": None})
    assert decisions["encoder/Tanh"].precision == "fp32" and decisions["decoder/body/attend"].precision == "fp16"
    main, loop_body = mixed.graph, body(mixed, "decoder")
    # The feature map and the transposed weight (which an FP32 node also reads) are cast once,
    # in the enclosing graph; the body reads the cast tensors from outer scope.
    hoisted = {cast.input[0]: cast.output[0] for cast in _casts(main)}
    assert set(hoisted) == {"memory", "Wo_t"}
    reads = {n.name: list(n.input) for n in loop_body.node}
    assert reads["decoder/body/attend"][1] == hoisted["memory"]
    assert reads["decoder/body/project"][1] == hoisted["Wo_t"]
    assert element_types(mixed)[hoisted["memory"]] == FP16
    # Inside the body, Casts only of what changes per step: the carried state, the scanned
    # input, the body outputs (each keeps its declared FP32 type). None of an outer value.
    outer = _body_reads_from_outer(body(model, "decoder"))
    assert not [cast for cast in _casts(loop_body) if cast.input[0] in outer]
    per_step = {"h_in", "h_out/fp16", "h_scan/fp16"} | ({"y_t"} if make is scan_decoder else set())
    assert {cast.input[0] for cast in _casts(loop_body)} == per_step
    # A weight only FP16 body nodes read is stored in FP16: no Cast of it anywhere.
    assert element_types(mixed)["Wq"] == FP16 and "Wq" not in hoisted
    # The plan counts the Casts: once, and on every step of the loop.
    assert document["totals"]["casts"] == {"once": len(_casts(main)), "per_step": {"decoder": len(_casts(loop_body))}}


@pytest.mark.parametrize("make", [loop_decoder, scan_decoder])
def test_the_hoisted_model_runs_and_matches_the_fp32_reference(make):
    model, feeds = _decoder(make)
    _, _, _, mixed = planned(model, feeds, rules=ENCODER_FP32, auto={"max_abs": None})
    onnx.checker.check_model(mixed, full_check=True)
    reference, candidate = run(model, feeds), run(mixed, feeds)
    assert [r.shape for r in reference] == [c.shape for c in candidate]
    for expected, got in zip(reference, candidate):
        assert np.allclose(got, expected, **FP16_TOLERANCE)
    assert not np.array_equal(reference[1], candidate[1])  # the body really computes in FP16
    emulated = EmulatedRunner(mixed).run(feeds)
    for output, expected in zip(mixed.graph.output, reference):
        assert np.allclose(emulated[output.name], expected, **FP16_TOLERANCE)


def test_nested_loops_cast_each_invariant_in_the_scope_that_holds_it():
    """ctx (computed in the outer body) is cast once per outer step, memory (main graph) once,
    also when an If inside the inner body is what reads it."""
    model = nested_decoder()
    feeds = feeds_for(model, seed=5)
    rules = {"fp32": {"match": "regex", "pattern": "encoder/.*|decoder/body/context.*", "precision": "fp32"}}
    _, _, document, mixed = planned(model, feeds, rules=rules, auto={"max_abs": None})
    outer_body = body(mixed, "decoder")
    inner_body = _body_of(outer_body, "decoder/body/refine")
    assert [c.input[0] for c in _casts(mixed.graph)] == ["memory"]
    assert [c.input[0] for c in _casts(outer_body)] == ["ctx"]
    assert sorted(c.input[0] for c in _casts(inner_body)) == ["g_in", "g_out/fp16"]  # carried state in, out
    branch = _body_of(inner_body, "decoder/body/refine/body/choose", "then_branch")
    assert not _casts(branch) and branch.node[0].input[1] == _casts(mixed.graph)[0].output[0]
    assert document["totals"]["casts"] == {"once": 1, "per_step": {"decoder": 1, "decoder/body/refine": 2}}
    reference = run(model, feeds)
    for expected, got in zip(reference, run(mixed, feeds)):
        assert np.allclose(got, expected, **FP16_TOLERANCE)
    assert np.allclose(EmulatedRunner(mixed).run(feeds)["h_final"], reference[0], **FP16_TOLERANCE)


def test_the_stage_writes_the_casts_per_step_into_the_plan(tmp_path):
    model, feeds = _decoder(loop_decoder)
    mixed, plan = run_stage(tmp_path, model, feeds, rules=ENCODER_FP32, auto={"max_abs": None})
    assert plan["totals"]["casts"] == {"once": 2, "per_step": {"decoder": 3}}
    hoisted = [c for c in mixed.graph.node if c.op_type == "Cast"]
    assert {c.input[0] for c in hoisted} == {"memory", "Wo_t"}
    assert np.allclose(run(mixed, feeds)[0], run(model, feeds)[0], **FP16_TOLERANCE)


def test_weights_an_old_exporter_lists_as_graph_inputs_are_cast_once_before_the_loop():
    """Initializers listed as graph inputs (keep_initializers_as_inputs) can be fed, so they stay
    FP32 graph inputs: the FP16 body reads one Cast of each made before the loop."""
    model, feeds = _decoder(loop_decoder)
    for tensor in model.graph.initializer:
        if tensor.data_type == TensorProto.FLOAT:
            model.graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
    _, _, document, mixed = planned(model, feeds, rules=ENCODER_FP32, auto={"max_abs": None})
    assert {c.input[0] for c in _casts(mixed.graph)} == {"Wq", "memory", "Wo_t"}
    assert {c.input[0] for c in _casts(body(mixed, "decoder"))} == {"h_in", "h_out/fp16", "h_scan/fp16"}
    assert document["totals"]["casts"] == {"once": 3, "per_step": {"decoder": 3}}
    for expected, got in zip(run(model, feeds), run(mixed, feeds)):
        assert np.allclose(got, expected, **FP16_TOLERANCE)
