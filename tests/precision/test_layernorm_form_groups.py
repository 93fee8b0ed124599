"""LayerNorms as tf2onnx / jax2tf / hand-written exports write them are one FP32 group.

E[x^2] - E[x]^2 on inputs whose mean is large against their spread (x ~ 100 +- 0.5:
x^2 ~ 1e4 where FP16's spacing is 8, the variance is 0.08) cancels to garbage in
FP16; the centred forms lose x - E[x] to FP16 rounding at 100 (spacing 0.06).
Naive FP16 must fail under the emulator; the default config and transformer_fp16
must pass, with the fusion (upgrade_opset) and, with it switched off
(`upgrade_opset=keep_layernorm`, as for a LayerNorm the fusion refuses), through
the normalization group alone.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.graph.layernorm_forms import FORMS, layernorm_form, unbiased_std_form
from tests.precision.test_auto_rules import plan
from trtpipe import api

GROUP = "normalization group: decomposed LayerNorm"
OFFSET_INPUT = "+data.inputs.x={low:99.5,high:100.5,dtype:float32}"


@pytest.mark.parametrize(("variance", "normalise"), FORMS)
def test_every_node_of_the_norm_is_in_one_fp32_group(variance, normalise):
    _, decisions = plan(layernorm_form(variance, normalise), auto={"max_abs": None, "constants": "off"})
    matmul = next(n for n in decisions if n.startswith("/ln/MatMul"))
    assert decisions[matmul].precision == "fp16"
    norm = {n: d for n, d in decisions.items() if n != matmul}
    assert all(d.reason.startswith(GROUP) and d.precision == "fp32" for d in norm.values()), norm
    assert len({d.reason for d in norm.values()}) == 1  # one unit, one label
    form = "moment difference" if "moments" in variance or variance == "jax2tf" else "centred square"
    assert f"({form})" in next(iter(norm.values())).reason


def _one_group(decisions) -> str:
    """The one label of every node but the MatMul, which stays FP16; all of them FP32."""
    matmul = next(n for n in decisions if "MatMul" in n)
    assert decisions[matmul].precision == "fp16"
    norm = {n: d for n, d in decisions.items() if n != matmul}
    assert all(d.reason.startswith(GROUP) and d.precision == "fp32" for d in norm.values()), norm
    (reason,) = {d.reason for d in norm.values()}
    return reason


@pytest.mark.parametrize("folded", [False, True])
def test_unbiased_std_with_eps_on_the_std_is_one_group_named_for_what_it_is(folded):
    # torch's `a_2 * (x - mean) / (x.std(-1) + eps) + b_2`: two means of x, the variance times N/(N-1), eps
    # added to the std. Not LayerNormalization (never fused), but a normalization all the same.
    model = unbiased_std_form(folded=folded)
    if not folded:  # N from Shape(x) as torch writes it: the sanitize stage folds it to a constant first
        from onnx_graphsurgeon import export_onnx, import_onnx
        model = export_onnx(import_onnx(model).fold_constants().cleanup())
    _, decisions = plan(model, auto={"max_abs": None, "constants": "off"})
    reason = _one_group(decisions)
    assert "(centred square, unbiased std: variance x N/(N-1), N=16, eps added to the std: not LayerNormalization)" \
        in reason, reason
    assert {"/ln/ReduceMean_0", "/ln/ReduceMean_1"} <= set(decisions)  # both means are in it


def test_unbiased_variance_under_the_root_is_one_group_too():
    # (x - mean) / sqrt(x.var(-1) + eps): eps where LayerNormalization has it, the variance N/(N-1) times larger.
    _, decisions = plan(unbiased_std_form(folded=True, eps_on_std=False), auto={"max_abs": None, "constants": "off"})
    reason = _one_group(decisions)
    assert "(centred square, unbiased std: variance x N/(N-1), N=16: not LayerNormalization)" in reason, reason


def test_spatial_keras_norm_the_fusion_refuses_is_one_group():
    # tf2onnx's GlobalAveragePool means over H, W with a per-channel gamma folded into 1/std.
    model = layernorm_form("gap_centred_mul", "keras", shape=(2, 4, 5, 6), gamma_shape=(4, 1, 1))
    _, decisions = plan(model, auto={"max_abs": None, "constants": "off"})
    assert "(centred square) around /ln/GlobalAveragePool_3" in _one_group(decisions)


def test_centred_tensor_used_elsewhere_is_not_pulled_into_the_group():
    # gamma * (x - mean) may join the group before the division; a (x - mean) * 2 that feeds something
    # else is not the norm's.
    model = unbiased_std_form(folded=True)
    model.graph.node.append(helper.make_node("Mul", ["centered", "two"], ["side"], name="side"))
    model.graph.initializer.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    model.graph.output.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, None))
    _, decisions = plan(model, auto={"max_abs": None, "constants": "off"})
    assert decisions["side"].precision == "fp16", decisions["side"]
    scaled = next(n.name for n in model.graph.node if n.output[0] == "scaled")  # gamma * (x - mean) of the norm
    assert decisions[scaled].reason.startswith(GROUP)


def test_a_variance_that_is_not_normalised_by_is_no_group():
    # E[x^2] - E[x]^2 as a feature (no Sqrt, nothing divided by it): nothing is pulled FP32.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[-1]),
             helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq"], ["m2"], name="second", axes=[-1]),
             helper.make_node("Mul", ["m", "m"], ["msq"], name="mean_square"),
             helper.make_node("Sub", ["m2", "msq"], ["var"], name="variance"),
             helper.make_node("Mul", ["var", "half"], ["y"], name="halve")]
    graph = helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    _, decisions = plan(model, auto={"max_abs": None, "constants": "off"})
    assert all(d.precision == "fp16" for d in decisions.values()), decisions


def test_the_group_stops_at_the_norms_output():
    # An activation after the norm (Relu) and a residual Add of x are not part of it.
    model = layernorm_form("jax2tf", "reciprocal_gamma")
    matmul = model.graph.node[-1]
    matmul.input[0] = "activated"
    model.graph.node.insert(len(model.graph.node) - 1, helper.make_node("Add", ["x", "normed"], ["residual"], name="residual"))
    model.graph.node.insert(len(model.graph.node) - 1, helper.make_node("Relu", ["residual"], ["activated"], name="relu"))
    shift = next(n.name for n in model.graph.node if n.output[0] == "normed")  # + beta, the norm's last node
    _, decisions = plan(model, auto={"max_abs": None, "constants": "off"})
    assert decisions["residual"].precision == "fp16" and decisions["relu"].precision == "fp16"
    assert decisions[shift].reason.startswith(GROUP)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("forms")


def _validate(workdir, model: onnx.ModelProto, name: str, *overrides: str) -> tuple[bool, dict]:
    path = workdir / f"{name}.onnx"
    onnx.save(model, str(path))
    run_dir = workdir / "runs" / f"{name}{'_'.join(o.split('=')[-1] for o in overrides)}"
    arguments = [f"model.path={path}", OFFSET_INPUT, f"cache.dir={workdir / 'cache'}", *overrides]
    try:
        result = api.run(arguments, run_dir=run_dir, start_dir=workdir)
    except api.PipelineFailed as failed:
        result = failed.result
    emulated = next(c for c in result.validation["candidates"] if c["name"] == "emulated")
    return emulated["passed"], emulated["outputs"]["y"]


@pytest.mark.slow  # three whole pipeline runs per form
@pytest.mark.parametrize(("variance", "normalise"), [("jax2tf", "reciprocal_gamma"), ("moments_mul", "keras"),
                                                     ("centred_mul", "reciprocal"), ("gap_centred_mul", "keras"),
                                                     ("unbiased", "std")])
def test_naive_fp16_fails_and_the_default_and_transformer_recipe_pass(workdir, variance, normalise):
    model = unbiased_std_form() if variance == "unbiased" else layernorm_form(variance, normalise)
    name = f"{variance}_{normalise}"
    passed, naive = _validate(workdir, model, name, "+recipe=naive_fp16")
    assert not passed and (naive["nonfinite"] > 0 or float(naive["cosine"]) < 0.999), naive
    for overrides in ([], ["upgrade_opset=keep_layernorm"], ["+recipe=transformer_fp16"]):
        passed, metrics = _validate(workdir, model, name, *overrides)
        assert passed and metrics["nonfinite"] == 0 and float(metrics["cosine"]) > 0.9999, (overrides, metrics)
