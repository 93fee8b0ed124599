"""(d) Naive FP16 on the built-in models: validation rejects it and localisation names the LayerNorm.

Why the first failing node is the first `Pow` of a LayerNorm: every node
before it (Gather/Add/Conv, the LayerNorm's ReduceMean and Sub) holds values
within FP16's range and is off by one rounding (< 0.1% of its scale). `Pow`
squares deviations of several hundred (the transformer's outlier channels,
nafnet's un-normalised intro features): 2e5-4e5 > 65504, so it is the first
tensor that becomes inf. In the transformer the embeddings' LayerNorm comes
before the attention mask in the file's topological order; the mask constant
(-3.4e38 -> -inf in FP16) is the second, independent origin of error.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import trtpipe.api as api
from tests.validate.graphs import FP32, make_model
from tests.validate.naive_fp16 import fp16_except, naive_fp16
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model
from trtpipe.validate.compare import compare_candidate
from trtpipe.numerics.emulator import EmulatedRunner
from trtpipe.numerics.inputs import generate_inputs
from trtpipe.validate.localize import localize, topological_order
from trtpipe.numerics.reference import ReferenceRunner

# Positive controls: the nodes a working precision plan keeps in FP32.
PROTECTED = {
    # LayerNorms, and the mask arithmetic (the top-level nodes: Unsqueeze/Cast/Sub/Mul of the mask)
    "transformer": lambda node: "/LayerNorm/" in node.name or node.name.count("/") == 1,
    "nafnet": lambda node: "/norm1/" in node.name or "/norm2/" in node.name,
}


@pytest.fixture(scope="module", params=["transformer", "nafnet"])
def case(request):
    name = request.param
    model = builtin_model(name)
    feeds = generate_inputs(model, BUILTIN_INPUT_SPECS[name], seed=0, iterations=2)
    return name, model, feeds


def verdict(model, candidate, feeds):
    reference = ReferenceRunner(model)
    emulated = EmulatedRunner(candidate)
    return compare_candidate(
        "candidate", [reference.run(f) for f in feeds], [emulated.run(f) for f in feeds], reference.graph_outputs
    )


def test_naive_fp16_is_rejected_and_protected_fp16_passes(case):
    name, model, feeds = case
    naive = verdict(model, naive_fp16(model), feeds)
    assert not naive.passed
    json.dumps(naive.to_json(), allow_nan=False)  # the report is plain JSON
    if name == "transformer":
        # 0 * -inf from the FP16 mask: every value of both outputs is NaN.
        assert naive.outputs["last_hidden_state"].metrics.nonfinite == 16 * 64
        assert naive.to_json()["outputs"]["pooler_output"]["max_abs"] == "inf"
    else:
        # The variance overflows, the norm collapses to its bias; the image is finite but wrong.
        restored = naive.outputs["restored"]
        assert restored.metrics.nonfinite == 0
        assert restored.metrics.psnr < 35 and any(r.startswith("psnr") for r in restored.reasons)
    protected = verdict(model, fp16_except(model, PROTECTED[name]), feeds)
    assert protected.passed, protected.reasons


def test_localisation_names_the_first_layernorm_pow(case):
    name, model, feeds = case
    found = localize(model, naive_fp16(model), feeds[0])
    first = found.first
    expected = {"transformer": "/embeddings/LayerNorm/Pow", "nafnet": "/encoders.0/encoders.0.0/norm1/Pow"}[name]
    assert first["node"] == expected and first["op_type"] == "Pow"
    assert first["tensor"] == f"{expected}_output_0"
    assert first["cand_nonfinite"] > 0 and first["cand_max_abs_error"] == "inf"
    assert 65504 < first["ref_max_abs"] < 1e6
    assert "overflow" in first["reason"]
    origins = [origin["node"] for origin in found.origins]
    if name == "transformer":
        assert origins == [expected, "/Constant_3"]  # the FP32-min mask constant, now -inf
        assert found.origins[1]["ref_max_abs"] == pytest.approx(3.4028234663852886e38)
    else:
        # Every LayerNorm2d variance overflows on its own (the later ones from inputs that the first
        # collapsed norm already put above the threshold): each is a place where inf enters.
        pows = [t.node for t in found.tensors if t.op_type == "Pow"]
        assert origins == pows and len(pows) == 4 and origins[0] == expected
        assert all(origin["kind"] == "nonfinite" and origin["ref_max_abs"] > 65504 for origin in found.origins)
    # Everything before the Pow is within one FP16 rounding of the reference.
    before = found.tensors[: [t.node for t in found.tensors].index(expected)]
    assert before and all(t.relative_error < 1e-3 and t.precision == "fp16" for t in before)
    json.dumps(found.to_json(), allow_nan=False)


def test_protected_nafnet_localises_nothing():
    model = builtin_model("nafnet")
    feeds = generate_inputs(model, BUILTIN_INPUT_SPECS["nafnet"], seed=0, iterations=1)[0]
    found = localize(model, fp16_except(model, PROTECTED["nafnet"]), feeds)
    assert found.first is None and found.origins == []
    precisions = {t.node: t.precision for t in found.tensors}
    assert precisions["/encoders.0/encoders.0.0/norm1/Pow"] == "fp32"
    assert precisions["/intro/Conv"] == "fp16"
    # Inserted Casts have no counterpart in the reference: listed, not judged.
    assert "image__fp16" in found.unmatched


def test_topological_order_keeps_file_order_and_repairs_a_shuffled_graph():
    model = builtin_model("transformer")
    assert [index for index, _ in topological_order(model.graph)] == list(range(len(model.graph.node)))
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))
    order = [node for _, node in topological_order(model.graph)]
    produced = {name for name in ("input_ids", "attention_mask")} | {t.name for t in model.graph.initializer}
    for node in order:
        assert all(name in produced for name in node.input if name)
        produced.update(node.output)


def cancel_then_square_model():
    """x in [-1, 1] shifted by 1000 and back (FP16's step at 1000 is 0.5: the round trip is off
    by up to 25% of |x|, above the threshold but finite), then scaled by 300 and squared: the
    reference reaches 9e4 > 65504, so the square is the first tensor that becomes inf."""
    nodes = [
        helper.make_node("Add", ["x", "thousand"], ["shifted"], name="shift"),
        helper.make_node("Sub", ["shifted", "thousand"], ["recovered"], name="unshift"),
        helper.make_node("Mul", ["recovered", "gain"], ["scaled"], name="scale"),
        helper.make_node("Mul", ["scaled", "scaled"], ["squared"], name="square"),
        helper.make_node("Sqrt", ["squared"], ["y"], name="root"),
    ]
    constants = [numpy_helper.from_array(np.array(1000.0, np.float32), "thousand"),
                 numpy_helper.from_array(np.array(300.0, np.float32), "gain")]
    return make_model(nodes, [helper.make_tensor_value_info("x", FP32, [4, 64])],
                      [helper.make_tensor_value_info("y", FP32, [4, 64])], constants)


def test_the_first_nonfinite_node_is_named_before_an_earlier_node_above_the_threshold():
    model = cancel_then_square_model()
    feeds = {"x": np.random.RandomState(0).uniform(-1, 1, (4, 64)).astype(np.float32)}
    found = localize(model, naive_fp16(model), feeds)
    errors = {t.node: t for t in found.tensors}
    assert errors["shift"].relative_error < 1e-3 and not errors["shift"].failed
    assert 0.01 < errors["unshift"].relative_error < 1.0 and errors["unshift"].cand_nonfinite == 0
    assert errors["square"].cand_nonfinite > 0 and errors["square"].ref_max_abs > 65504

    assert found.first["node"] == "square" and found.first["kind"] == "nonfinite"
    assert found.first_nonfinite == found.first and "overflow" in found.first["reason"]
    above = found.first_above_threshold
    assert above["node"] == "unshift" and above["kind"] == "above_threshold" and above["cand_nonfinite"] == 0
    # Both are places where damage enters: the cancellation (error), then the square (inf).
    assert [(o["node"], o["kind"]) for o in found.origins] == [("unshift", "above_threshold"),
                                                               ("square", "nonfinite")]
    report = found.to_json()
    assert report["first_nonfinite"]["node"] == "square" and report["first_above_threshold"]["node"] == "unshift"
    json.dumps(report, allow_nan=False)


def test_the_stage_reports_both_kinds_on_the_console_and_in_validation_json(tmp_path):
    path = tmp_path / "cancel_then_square.onnx"
    onnx.save(cancel_then_square_model(), str(path))
    with pytest.raises(api.PipelineFailed) as failed:
        api.run(["+recipe=naive_fp16", f"model.path={path}", "+data.inputs.x={low:-1,high:1}",
                 f"cache.dir={tmp_path / 'cache'}", "stages=[sanitize,upgrade_opset,precision,validate]"],
                run_dir=tmp_path / "run", start_dir=tmp_path)
    localization = failed.value.result.validation["localization"]
    assert localization["first"]["node"] == "square" and localization["first"]["kind"] == "nonfinite"
    assert localization["first_above_threshold"]["node"] == "unshift"
    console = (tmp_path / "run" / "validate" / "validation.txt").read_text()
    nonfinite_line = next(line for line in console.splitlines() if "first node with non-finite values" in line)
    above_line = next(line for line in console.splitlines() if "first node above the error threshold" in line)
    assert "square (Mul, fp16)" in nonfinite_line and "overflow" in nonfinite_line
    assert "unshift (Sub, fp16)" in above_line and "(1.00%)" in above_line
    stage = next(s for s in failed.value.result.stages if s.name == "validate")
    # The failure line names the culprits without repeating the table's numbers (issue 14, item 9).
    assert "first non-finite node: square (Mul, fp16)" in stage.reason + str(stage.error)
    assert "first node above the threshold: unshift (Sub, fp16)" in stage.reason + str(stage.error)


def masked_softmax_model():
    """An exporter's additive attention mask: (1 - mask) * float32.min, added to the scores, Softmax."""
    nodes = [
        helper.make_node("Sub", ["one", "mask"], ["inverted"], name="invert"),
        helper.make_node("Mul", ["inverted", "lowest"], ["additive"], name="mask_scale"),
        helper.make_node("Add", ["scores", "additive"], ["masked"], name="apply_mask"),
        helper.make_node("Softmax", ["masked"], ["y"], name="softmax", axis=-1),
    ]
    constants = [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
                 numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "lowest")]
    inputs = [helper.make_tensor_value_info("scores", FP32, [4, 16]),
              helper.make_tensor_value_info("mask", FP32, [4, 16])]
    return make_model(nodes, inputs, [helper.make_tensor_value_info("y", FP32, [4, 16])], constants)


def test_a_mask_saturating_with_the_reference_is_not_blamed_as_error():
    model = masked_softmax_model()
    rng = np.random.RandomState(0)
    mask = (rng.uniform(size=(4, 16)) > 0.3).astype(np.float32)
    mask[:, 0] = 1.0  # every row keeps at least one position
    feeds = {"scores": rng.normal(size=(4, 16)).astype(np.float32), "mask": mask}
    candidate = naive_fp16(model)  # its constant as trtpipe's conversion writes it: clipped to -65504
    lowest = next(init for init in candidate.graph.initializer if init.name == "lowest")
    lowest.CopyFrom(numpy_helper.from_array(np.array(-65504.0, np.float16), "lowest"))
    found = localize(model, candidate, feeds)
    errors = {t.node: t for t in found.tensors}
    scaled = errors["mask_scale"]
    assert scaled.ref_max_abs > 1e38 and scaled.cand_saturated == int((mask == 0).sum())
    assert not scaled.failed and scaled.cand_max_abs_error == 0.0
    assert found.first is None and found.origins == []  # the softmax after it gives the same result
    # The same tensor with a real error where the reference is in range is still blamed.
    real = localize(model, naive_fp16(model), feeds)  # the constant as -inf: 0 * -inf = NaN
    assert real.first["node"] == "mask_scale" and real.first["kind"] == "nonfinite"
