"""fuse_layernorms: structure and ONNX Runtime numerics, and every refusal with its reason."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tests.graph import graphs
from trtpipe.graph.names.absorbed_nodes import METADATA_KEY, read_absorbed_nodes, record_absorbed_nodes
from trtpipe.graph.layernorm.layernorm_fusion import fuse_layernorms

SCOPE = graphs.LN_SCOPE
DECOMPOSED_OPS = {"ReduceMean", "Sub", "Pow", "Sqrt", "Div"}


def assert_same_outputs(before, after, shape):
    x = graphs.random_input(shape)
    for got, want in zip(graphs.run(after, {"x": x}), graphs.run(before, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"opset": 18},  # axes as an input
        {"constants_as_nodes": True},  # exponent and epsilon from Constant nodes
        {"affine": False},
        {"gamma_shape": [1, 1, 8]},  # leading 1s
        {"axes": (1, 2)},  # the last two axes, written positive
        {"swapped": True},  # Add(eps, var), Mul(gamma, x), Add(beta, x)
    ],
)
def test_trailing_axis_layernorm_is_fused(variant):
    model = graphs.layernorm_graph(**variant)
    fused, report = fuse_layernorms(model)

    ops = [node.op_type for node in fused.graph.node]
    assert ops.count("LayerNormalization") == 1 and not DECOMPOSED_OPS & set(ops)
    assert "Mul" not in ops and ops.count("Add") == 0
    name = f"{SCOPE}/LayerNormalization"
    assert [entry["node"] for entry in report["fused"]] == [name] and report["refused"] == []
    absorbed = report["fused"][0]["absorbed"]
    assert absorbed[0] == f"{SCOPE}/ReduceMean" and absorbed[-1] == (f"{SCOPE}/Add_1" if variant.get("affine", True) else f"{SCOPE}/Div")
    assert read_absorbed_nodes(fused) == {name: absorbed}
    layernorm = next(node for node in fused.graph.node if node.op_type == "LayerNormalization")
    assert layernorm.name == name and layernorm.output[0] == ("ln_out" if variant.get("affine", True) else "normalized")
    onnx.checker.check_model(fused, full_check=True)
    assert_same_outputs(model, fused, (2, 5, 8))


def test_metadata_is_canonical_json_merged_with_existing():
    model = graphs.layernorm_graph()
    record_absorbed_nodes(model, {"/earlier/LayerNormalization": ["/earlier/ReduceMean"]})
    fused, _ = fuse_layernorms(model)
    text = next(p.value for p in fused.metadata_props if p.key == METADATA_KEY)
    mapping = json.loads(text)
    assert text == json.dumps(mapping, sort_keys=True, separators=(",", ":"))
    assert set(mapping) == {"/earlier/LayerNormalization", f"{SCOPE}/LayerNormalization"}


def test_layernorm2d_over_channels_is_not_fused():
    model = graphs.layernorm2d_graph()
    before = model.SerializeToString()
    result, report = fuse_layernorms(model)
    assert result.SerializeToString() == before
    assert report["fused"] == []
    assert report["refused"] == [
        {"anchor": "/stem/LayerNorm2d/ReduceMean", "reason": "reduces over axis 1, not the trailing axes"}
    ]


def test_refusals_are_logged_at_info(caplog):
    caplog.set_level("INFO", logger="trtpipe.graph.layernorm.layernorm_fusion")
    fuse_layernorms(graphs.layernorm2d_graph())
    assert "reduces over axis 1, not the trailing axes" in caplog.text


def test_mean_used_elsewhere_is_refused():
    model = graphs.layernorm_graph(mean_also_used=True)
    result, report = fuse_layernorms(model)
    assert result is model and report["fused"] == []
    (refusal,) = report["refused"]
    assert "'mean'" in refusal["reason"] and "/other/Neg" in refusal["reason"]


def test_gamma_of_other_shape_keeps_affine_outside():
    model = graphs.layernorm_graph(gamma_shape=[5, 1])  # broadcasts along axis -2: not a LayerNorm scale
    fused, report = fuse_layernorms(model)
    (entry,) = report["fused"]
    assert entry["affine"] is False and "gamma shape [5, 1]" in entry["note"]
    assert [n.op_type for n in fused.graph.node] == ["LayerNormalization", "Mul", "Add", "Relu"]
    assert_same_outputs(model, fused, (2, 5, 8))


def test_needs_opset_17():
    with pytest.raises(ValueError, match="opset"):
        fuse_layernorms(graphs.layernorm_graph(opset=13))


def test_fused_name_is_unique():
    model = graphs.layernorm_graph()
    taken = onnx.helper.make_node("Identity", ["y"], ["y2"], name=f"{SCOPE}/LayerNormalization")
    model.graph.node.append(taken)
    model.graph.output.append(graphs.float_input("y2", [2, 5, 8]))
    _, report = fuse_layernorms(model)
    assert report["fused"][0]["node"] == f"{SCOPE}/LayerNormalization_1"
