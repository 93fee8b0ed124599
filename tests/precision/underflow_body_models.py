"""Models whose tiny tensors live inside If/Loop bodies (issue 30 item 6): the audio front end of
underflow_models.py with its power spectrum and Log computed in a body, and the Reciprocal of small
variances masked with +inf before a negative power (a tensor holding inf and tiny values)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.precision.underflow_models import BINS, FRAMES, _const, _head, _make, _value, audio_front_end

_POWER_SHAPE = [1, BINS, FRAMES]


def _power_log_nodes() -> list[onnx.NodeProto]:
    """re, im (outer scope) -> re*re + im*im -> Log (no epsilon: a flushed zero gives -inf)."""
    return [helper.make_node("Mul", ["re", "re"], ["re2"], name="re_sq"),
            helper.make_node("Mul", ["im", "im"], ["im2"], name="im_sq"),
            helper.make_node("Add", ["re2", "im2"], ["power"], name="power"),
            helper.make_node("Log", ["power"], ["logpower"], name="log")]


def audio_front_end_in_body(kind: str) -> tuple[onnx.ModelProto, dict]:
    """The framing Conv and Split in the main graph; the power spectrum and its Log inside the then-branch of
    an If (`kind="if"`, the condition is an input, True in the feeds) or the body of a Loop of 2 trips
    (`kind="loop"`, its scan output averaged over the trips); the head in the main graph."""
    front, feeds = audio_front_end(eps=False)
    nodes = [n for n in front.graph.node if n.name in ("stft", "split_re_im")]
    inits = [i for i in front.graph.initializer if i.name in ("basis", "halves")]
    log_value = helper.make_tensor_value_info("logpower", TensorProto.FLOAT, _POWER_SHAPE)
    if kind == "if":
        then_branch = helper.make_graph(_power_log_nodes(), "then", [], [log_value])
        else_branch = helper.make_graph([helper.make_node("Identity", ["re"], ["re_copy"], name="copy")], "else", [],
                                        [helper.make_tensor_value_info("re_copy", TensorProto.FLOAT, _POWER_SHAPE)])
        nodes.append(helper.make_node("If", ["c"], ["body_out"], name="branch", then_branch=then_branch,
                                      else_branch=else_branch))
        feeds = {**feeds, "c": np.array(True)}
        inputs = [_value("audio", list(feeds["audio"].shape)), helper.make_tensor_value_info("c", TensorProto.BOOL, [])]
        reduced = "body_out"
    else:
        body = helper.make_graph(
            [*_power_log_nodes(), helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
            "loop_body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                          helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), log_value])
        nodes += [helper.make_node("Loop", ["trips", "true"], ["stacked"], name="steps", body=body),
                  helper.make_node("ReduceMean", ["stacked"], ["body_out"], name="over_trips", axes=[0],
                                   keepdims=0)]
        inits += [numpy_helper.from_array(np.array(2, np.int64), "trips"), numpy_helper.from_array(np.array(True),
                                                                                                  "true")]
        inputs = [_value("audio", list(feeds["audio"].shape))]
        reduced = "body_out"
    nodes += [helper.make_node("Squeeze", [reduced, "axis0"], ["logspec"], name="squeeze"),
              helper.make_node("Transpose", ["logspec"], ["frames"], name="to_frames", perm=[1, 0]),
              helper.make_node("Sub", ["frames", "centre"], ["centred"], name="centre"),
              helper.make_node("Mul", ["centred", "scale"], ["features"], name="scale")]
    inits += [numpy_helper.from_array(np.array([0], np.int64), "axis0"), _const("centre", -18.0),
              _const("scale", 0.25)]
    _head(np.random.default_rng(0), "features", BINS, 512, 32, nodes, inits)
    return _make(nodes, inputs, [_value("y", [FRAMES, 32])], inits), feeds


def masked_precision_weights(seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """Small local variances (1e-9 .. 1e-5, as underflow_models.reciprocal_of_variances) of which the masked
    channels are set to +inf, then Pow(-0.25): a precision weight (0 where masked) of normal-range features;
    then an MLP head. The tensor Pow reads holds inf and tiny values."""
    rng = np.random.default_rng(seed)
    rows, width = 32, 128
    scales = np.logspace(-4.5, -2.5, width)
    proj = rng.standard_normal([width, width]) / np.sqrt(width) * scales
    band = (np.abs(np.arange(width)[:, None] - np.arange(width)[None, :]) < 4) / 7.0
    inits = [_const("proj_w", proj), _const("band", band), _const("inf", np.inf), _const("minus_quarter", -0.25),
             _const("feat_w", rng.standard_normal([width, width]) / np.sqrt(width))]
    nodes = [helper.make_node("MatMul", ["x", "proj_w"], ["feat"], name="proj"),
             helper.make_node("Mul", ["feat", "feat"], ["feat2"], name="square"),
             helper.make_node("MatMul", ["feat2", "band"], ["var"], name="local_variance"),
             helper.make_node("Where", ["keep", "var", "inf"], ["masked_var"], name="mask"),
             helper.make_node("Pow", ["masked_var", "minus_quarter"], ["precision"], name="weights"),
             helper.make_node("MatMul", ["x", "feat_w"], ["features"], name="features"),
             helper.make_node("Mul", ["features", "precision"], ["weighted"], name="weight")]
    _head(rng, "weighted", width, 512, 16, nodes, inits)
    keep = helper.make_tensor_value_info("keep", TensorProto.BOOL, [1, width])
    model = _make(nodes, [_value("x", [rows, width]), keep], [_value("y", [rows, 16])], inits)
    mask = np.ones([1, width], bool)
    mask[0, ::5] = False
    return model, {"x": rng.standard_normal([rows, width]).astype(np.float32), "keep": mask}
