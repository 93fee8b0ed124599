"""Hand-written single-op models for the ops of the parser list that have no single-node ONNX
backend case (bench/rtx/op_models.py): random generators, GlobalLpPool, MaxRoiPool,
Multinomial, and the sequence/optional ops, which need a producer or consumer beside them
(a graph input or output cannot be a sequence for TensorRT), so their model is a short
chain: the op under test plus SequenceConstruct / ConcatFromSequence around it.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
# Experimental ops ONNX removed (opset 10): onnx has no schema for them, ONNX Runtime no kernel.
REMOVED = {"ImageScaler", "ParametricSoftplus", "ScaledTanh"}


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "single_op", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def _f(name, elem, value):
    from bench.rtx.op_models import _tensor
    return _tensor(name, np.asarray(value, np.float32), elem)


def _graph(op: str, t: int):
    x = _vi("x", t, [1, 3, 4, 4])
    seq_in = [helper.make_node("SequenceConstruct", ["x", "x"], ["seq"], name="make_seq")]
    concat = helper.make_node("ConcatFromSequence", ["seq2"], ["y"], axis=0, name="concat")
    pos = numpy_helper.from_array(np.array(0, np.int64), "pos")
    if op in ("RandomNormal", "RandomUniform"):
        return _model([helper.make_node(op, [], ["y"], dtype=t, shape=[2, 3], name="n")], [], [_vi("y", t, [2, 3])])
    if op in ("RandomNormalLike", "RandomUniformLike"):
        return _model([helper.make_node(op, ["x"], ["y"], dtype=t, name="n")], [x], [_vi("y", t, [1, 3, 4, 4])])
    if op == "GlobalLpPool":
        return _model([helper.make_node(op, ["x"], ["y"], p=2, name="n")], [x], [_vi("y", t, [1, 3, 1, 1])])
    if op == "MaxRoiPool":
        rois = _f("rois", t, [[0, 0, 0, 3, 3], [0, 1, 1, 2, 2]])
        return _model([helper.make_node(op, ["x", "rois"], ["y"], pooled_shape=[2, 2], name="n")], [x],
                      [_vi("y", t, [2, 3, 2, 2])], [rois])
    if op == "Multinomial":
        return _model([helper.make_node(op, ["x"], ["y"], sample_size=3, name="n")], [_vi("x", t, [2, 4])],
                      [_vi("y", TensorProto.INT32, [2, 3])])
    if op == "SequenceConstruct":
        return _model([*seq_in, helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0, name="concat")],
                      [x], [_vi("y", t, [2, 3, 4, 4])])
    if op == "ConcatFromSequence":
        return _model([*seq_in, helper.make_node(op, ["seq"], ["y"], axis=0, name="n")], [x], [_vi("y", t, [2, 3, 4, 4])])
    if op == "SequenceAt":
        return _model([*seq_in, helper.make_node(op, ["seq", "pos"], ["y"], name="n")], [x],
                      [_vi("y", t, [1, 3, 4, 4])], [pos])
    if op == "SequenceLength":
        return _model([*seq_in, helper.make_node(op, ["seq"], ["y"], name="n")], [x], [_vi("y", TensorProto.INT64, [])])
    if op == "SequenceErase":
        return _model([*seq_in, helper.make_node(op, ["seq", "pos"], ["seq2"], name="n"), concat], [x],
                      [_vi("y", t, [1, 3, 4, 4])], [pos])
    if op == "SequenceEmpty":
        return _model([helper.make_node(op, [], ["e"], dtype=t, name="n"),
                       helper.make_node("SequenceInsert", ["e", "x"], ["seq2"], name="insert"), concat], [x],
                      [_vi("y", t, [1, 3, 4, 4])])
    if op == "Optional":
        return _model([helper.make_node(op, ["x"], ["o"], name="n"),
                       helper.make_node("OptionalGetElement", ["o"], ["y"], name="get")], [x], [_vi("y", t, [1, 3, 4, 4])])
    return None


def build(op: str, type_name: str):
    from bench.rtx.op_models import TYPES, NotBuilt, OpModel

    if op in REMOVED:
        raise NotBuilt(f"{op} is an experimental op ONNX removed in opset 10: no schema, no ONNX Runtime kernel")
    model = _graph(op, TYPES[type_name])
    if model is None:
        raise NotBuilt(f"no single-op model for {op} (no ONNX backend case, no hand-written one)")
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # noqa: BLE001 - the checker's reason is the verdict
        raise NotBuilt(f"{type_name}: not a valid ONNX model of {op}: {str(exc).strip().splitlines()[0][:160]}") from None
    return OpModel(op, type_name, model, "hand-written (bench/rtx/op_extra.py)", OPSET)
