"""tf2onnx's InstanceNormalization form of a LayerNorm (issue 30 item 6) is fused into
LayerNormalization: structure, numerics against ONNX Runtime, epsilon carried over, refusals with reasons.
Before this rule it was left as InstanceNormalization, Mul, Add (and the Shape/ConstantOfShape feeding it)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.graph import graphs
from tests.graph.instance_norm_layernorm import CHANNELS, instance_norm_layernorm
from trtpipe.graph.layernorm.layernorm_fusion import fuse_layernorms


def _assert_same_numbers(model, fused, shapes):
    for shape in shapes:
        x = graphs.random_input(shape)
        np.testing.assert_allclose(graphs.run(fused, {"x": x})[0], graphs.run(model, {"x": x})[0],
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [17, 18])
def test_tf2onnx_instance_norm_layernorm_is_fused(opset):
    model = instance_norm_layernorm(epsilon=1e-3, opset=opset)
    fused, report = fuse_layernorms(model)
    assert [n.op_type for n in fused.graph.node] == ["LayerNormalization", "MatMul"]  # Shape..ConstantOfShape gone
    (entry,) = report["fused"]
    assert entry["axis"] == -1 and entry["affine"] and report["refused"] == []
    assert entry["absorbed"] == ["ln/add_1/InstanceNormalization", "ln/Mul", "ln/Add"]
    (node,) = [n for n in fused.graph.node if n.op_type == "LayerNormalization"]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["axis"] == -1 and attrs["epsilon"] == pytest.approx(1e-3)  # carried over, not the default
    assert list(node.input) == ["x", "ln/gamma", "ln/beta"]
    onnx.checker.check_model(fused, full_check=True)
    _assert_same_numbers(model, fused, [(2, 5, CHANNELS), (1, 9, CHANNELS)])  # any batch and sequence length


def test_folded_ones_and_zeros_are_fused_too():
    # A static sequence length: sanitize's constant folding leaves the ones and zeros as initializers.
    model = instance_norm_layernorm(folded=True, seq=6)
    fused, report = fuse_layernorms(model)
    assert [n.op_type for n in fused.graph.node] == ["LayerNormalization", "MatMul"], report
    _assert_same_numbers(model, fused, [(3, 6, CHANNELS)])


@pytest.mark.parametrize(("changes", "reason"), [
    ({"scale_fill": 2.0}, "the scale 'ln/ones' of ln/add_1/InstanceNormalization is not all 1"),
    ({"bias_fill": 0.5, "folded": True, "seq": 6}, "the bias 'ln/zeros' of ln/add_1/InstanceNormalization is not all 0"),
])
def test_an_instance_norm_with_its_own_affine_is_refused_with_the_reason(changes, reason):
    model = instance_norm_layernorm(**changes)
    result, report = fuse_layernorms(model)
    assert result is model and report["fused"] == []
    (refusal,) = report["refused"]
    assert refusal["anchor"] == "ln/add_1/InstanceNormalization" and refusal["reason"].startswith(reason)
    assert "per index of axis 1" in refusal["reason"]
