"""fast_fold.fold_pass against Polygraphy's folding pass it replaces: the same model, byte for byte.

Each graph goes through both: Polygraphy's `fold_constants` (one pass,
sanitize's options) on one copy, `fold_pass` on another. The results must
serialize to the same bytes, and so must the two input models afterwards
(onnx-graphsurgeon writes into the model it imports; the fast path repeats
that). sanitize's whole output is compared too, and the folded model must
compute what the original did.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from polygraphy.backend.onnx import fold_constants

from tests.graph import graphs
from trtpipe.graph.fold import fast_fold
from trtpipe.onnxmodel import value_info
from trtpipe.graph.fold.fast_fold import fold_pass
from trtpipe.graph.onnx_gs.gs_export import tensor_type_bytes
from trtpipe.graph.sanitize import FOLD_SIZE_THRESHOLD_BYTES, sanitize_model
from trtpipe.models import builtin_model


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _constant(output, array):
    return helper.make_node("Constant", [], [output], value=numpy_helper.from_array(np.asarray(array), output + "_v"))


def _shapes_and_constants() -> onnx.ModelProto:
    """Constant nodes, Shape -> Gather/Slice of static and dynamic dims, a foldable chain, a Q/DQ pair.

    x[2, n, 8] -> Reshape(x, [dim0, -1, last]) + 2 * w + DQ(q) -> Mul by the dynamic dim n -> y.
    """
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        _constant("i0", np.array(0, np.int64)),
        helper.make_node("Gather", ["shape", "i0"], ["dim0"], name="gather_static", axis=0),
        helper.make_node("Gather", ["shape", "i1"], ["dim1"], name="gather_dynamic", axis=0),
        helper.make_node("Slice", ["shape", "starts", "ends"], ["last"], name="slice_static"),
        helper.make_node("Unsqueeze", ["dim0", "axes0"], ["dim0_1d"], name="unsqueeze"),
        helper.make_node("Concat", ["dim0_1d", "minus_one", "last"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["reshaped"], name="reshape"),
        _constant("w", rng.standard_normal(8).astype(np.float32)),
        _constant("two", np.array(2.0, np.float32)),
        helper.make_node("Mul", ["w", "two"], ["w2"], name="scale_w"),
        helper.make_node("Add", ["reshaped", "w2"], ["biased"], name="bias"),
        helper.make_node("DequantizeLinear", ["q", "q_scale", "q_zero"], ["dq"], name="dq"),
        helper.make_node("Add", ["biased", "dq"], ["summed"], name="add_dq"),
        helper.make_node("Cast", ["dim1"], ["dim1_f"], name="cast_dim", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["summed", "dim1_f"], ["y"], name="times_n"),
    ]
    inits = [_ints("i1", 1), _ints("starts", [2]), _ints("ends", [3]), _ints("axes0", [0]),
             _ints("minus_one", [-1]), numpy_helper.from_array(np.arange(8, dtype=np.int8), "q"),
             numpy_helper.from_array(np.array(0.5, np.float32), "q_scale"),
             numpy_helper.from_array(np.array(1, np.int8), "q_zero"), _ints("unused", [7])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return graphs.make_model(nodes, [x], [y], inits)


def _graphsurgeon_quirks() -> onnx.ModelProto:
    """A consumer *node* named like a constant tensor (graphsurgeon then does not evaluate what it reads), a
    Split of a constant with an unused output, and opset 9's attribute-form Slice of a Shape."""
    nodes = [
        _constant("w", np.arange(8, dtype=np.float32)),
        _constant("two", np.array(2.0, np.float32)),
        helper.make_node("Mul", ["w", "two"], ["w2"], name="scale"),
        helper.make_node("Add", ["x", "w2"], ["a"], name="w"),  # named like the constant tensor `w`
        helper.make_node("Split", ["w"], ["lo", "hi"], name="split", axis=0, split=[4, 4]),
        helper.make_node("Tile", ["lo", "reps"], ["lo2"], name="tile"),
        helper.make_node("Add", ["a", "lo2"], ["b"], name="add_lo"),
        helper.make_node("Shape", ["b"], ["shape"], name="shape"),
        helper.make_node("Slice", ["shape"], ["last"], name="slice", starts=[2], ends=[3], axes=[0]),
        helper.make_node("Concat", ["minus_one", "last"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["b", "target"], ["y"], name="reshape"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return graphs.make_model(nodes, [x], [y], [_ints("reps", [2]), _ints("minus_one", [-1])], opset=9)


def _consumer_named_like_an_unread_constant() -> onnx.ModelProto:
    """The consumer of a foldable tensor is named like an initializer and like a Constant's output that no
    node reads: graphsurgeon's name check sees only the constants `Graph.tensors()` reaches, so w2 folds."""
    nodes = [helper.make_node("Constant", [], ["mul_node"], value=numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("Mul", ["w", "two"], ["w2"], name="m"),
             helper.make_node("Add", ["x", "w2"], ["a"], name="add_node"),
             helper.make_node("Mul", ["w", "a"], ["y"], name="mul_node")]
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "w"),
             numpy_helper.from_array(np.array(2, np.float32), "two"), _ints("add_node", [7])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    return graphs.make_model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], inits)


def _nodes_graphsurgeon_remakes() -> onnx.ModelProto:
    """Nodes graphsurgeon writes back re-made (gs_export.exported_node): a doc string, an explicitly empty
    name, an attribute with a doc string, an INT attribute without its value, a kept ConstantOfShape whose
    tensor has no name; and a value info with a dim denotation (re-made by `make_tensor_value_info`)."""
    fill = helper.make_tensor("", TensorProto.FLOAT, [1], [1.5])
    fill.ClearField("name")
    nodes = [_constant("w", np.arange(8, dtype=np.float32)),
             helper.make_node("Add", ["x", "w"], ["a"], name="add", doc_string="exported by hand"),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Shape", ["r"], ["shape"], name="shape"),
             helper.make_node("ConstantOfShape", ["shape"], ["filled"], name="fill", value=fill),
             helper.make_node("Flatten", ["filled"], ["flat"], name="flatten", axis=1),
             helper.make_node("Softmax", ["flat"], ["y"], name="softmax")]
    nodes[2].name = ""
    nodes[5].attribute[0].doc_string = "the axis"
    nodes[6].attribute.add(name="axis", type=onnx.AttributeProto.INT)  # i left unset: graphsurgeon writes i=0
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    x.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    return graphs.make_model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])


def _value_float_constant() -> onnx.ModelProto:
    """A Constant written with `value_float`: outside the fast path (graphsurgeon lowers it to float64)."""
    nodes = [helper.make_node("Constant", [], ["half"], value_float=0.5),
             helper.make_node("Mul", ["x", "half"], ["y"])]
    return graphs.make_model(nodes, [graphs.float_input("x", [2, 3])], [graphs.float_input("y", [2, 3])])


def _constant_output() -> onnx.ModelProto:
    """y = beta * 0.5 does not depend on x: graphsurgeon writes the folded output's type from its values."""
    nodes = [helper.make_node("Relu", ["x"], ["unused"]), helper.make_node("Mul", ["beta", "half"], ["y"])]
    inits = [numpy_helper.from_array(np.ones(8, np.float32), "beta"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    return graphs.make_model(nodes, [graphs.float_input("x", [2, 8])], [graphs.float_input("y", [2, 4, 8])], inits)


def _prepared(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model as sanitize hands it to folding: shapes inferred."""
    return value_info.infer_shapes(onnx.ModelProto.FromString(model.SerializeToString()))


def _polygraphy_pass(model):
    return fold_constants(model, num_passes=1, partitioning=None, do_shape_inference=True, fold_shapes=True,
                          error_ok=True, size_threshold=FOLD_SIZE_THRESHOLD_BYTES,
                          allow_onnxruntime_shape_inference=False)


def _encoder() -> onnx.ModelProto:
    from bench.common.encoders import build_encoder

    return build_encoder(2)


@pytest.mark.parametrize("build", [_shapes_and_constants, _graphsurgeon_quirks, _nodes_graphsurgeon_remakes,
                                   _consumer_named_like_an_unread_constant,
                                   lambda: builtin_model("transformer"), lambda: builtin_model("t5"), _encoder],
                         ids=["shapes", "quirks", "remade", "unread_constant_names", "transformer", "t5", "encoder"])
def test_the_fast_pass_writes_polygraphys_bytes(build):
    prepared = _prepared(build())
    reference_input, fast_input = (onnx.ModelProto.FromString(prepared.SerializeToString()) for _ in range(2))
    reference = _polygraphy_pass(reference_input)
    fast = fold_pass(fast_input, infer_shapes=True, size_threshold=FOLD_SIZE_THRESHOLD_BYTES)
    assert fast is not None, "the fast path should cover this graph"
    assert len(fast.graph.node) < len(prepared.graph.node)  # it folded something
    assert fast.SerializeToString() == reference.SerializeToString()
    # graphsurgeon renames the Constant tensors it exports inside the model it was given: so must the fast path.
    assert fast_input.SerializeToString() == reference_input.SerializeToString()


def test_shapes_fold_to_the_right_values_and_the_model_computes_the_same():
    model = _prepared(_shapes_and_constants())
    folded = fold_pass(onnx.ModelProto.FromString(model.SerializeToString()), infer_shapes=True,
                       size_threshold=FOLD_SIZE_THRESHOLD_BYTES)
    ops = [node.op_type for node in folded.graph.node]
    assert "Constant" not in ops and "Concat" not in ops and "Slice" not in ops  # the static parts folded
    assert ops.count("Gather") == 1 and "DequantizeLinear" in ops  # the dynamic dim and Q/DQ stay
    initializers = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}
    assert initializers["target"].tolist() == [2, -1, 8]
    assert "unused" not in initializers
    x = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)
    np.testing.assert_array_equal(graphs.run(folded, {"x": x})[0], graphs.run(model, {"x": x})[0])


@pytest.mark.parametrize("build", [_value_float_constant, _constant_output], ids=["value_float", "constant_output"])
def test_out_of_scope_models_take_polygraphys_pass(tmp_path, build):
    model = _prepared(build())
    assert fold_pass(model, infer_shapes=True, size_threshold=FOLD_SIZE_THRESHOLD_BYTES) is None
    onnx.save(build(), str(tmp_path / "src.onnx"))
    assert _sanitized_bytes(tmp_path, fast=True) == _sanitized_bytes(tmp_path, fast=False)


@pytest.mark.parametrize("build", [_shapes_and_constants, lambda: builtin_model("nafnet"),
                                   lambda: builtin_model("gpt2")], ids=["shapes", "nafnet", "gpt2"])
def test_sanitize_writes_the_same_file_with_or_without_the_fast_pass(tmp_path, build):
    onnx.save(build(), str(tmp_path / "src.onnx"))
    assert _sanitized_bytes(tmp_path, fast=True) == _sanitized_bytes(tmp_path, fast=False)


def _sanitized_bytes(tmp_path, *, fast: bool) -> bytes:
    destination = tmp_path / f"out-{fast}.onnx"
    previous, fast_fold.ENABLED = fast_fold.ENABLED, fast
    try:
        sanitize_model(tmp_path / "src.onnx", destination)
    finally:
        fast_fold.ENABLED = previous
    return destination.read_bytes()


@pytest.mark.parametrize("elem_type, dims", [
    (TensorProto.FLOAT, None), (TensorProto.FLOAT, []), (0, [3]), (TensorProto.INT64, [-1, 0, 5, 2**40, -2**63]),
    (TensorProto.FLOAT16, ["", "batch", None, "x" * 200]), (TensorProto.BFLOAT16, [None] * 70), (1, ["é"])])
def test_type_bytes_are_make_tensor_type_proto_s(elem_type, dims):
    assert tensor_type_bytes(elem_type, dims) == helper.make_tensor_type_proto(elem_type, dims).SerializeToString()


def _shape_gather(index) -> onnx.ModelProto:
    """Reshape(x, Gather(Shape(x), index)): an index beyond the dims makes graphsurgeon's fold_shape_gather raise."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("Gather", ["shape", "index"], ["picked"], name="gather", axis=0),
             helper.make_node("Reshape", ["x", "picked"], ["y"], name="reshape")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    return graphs.make_model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                             [_ints("index", index)])


def test_shape_folding_errors_graphsurgeon_raises_too_take_its_pass_quietly(caplog):
    caplog.set_level("DEBUG", logger="trtpipe.graph.fold.fast_fold")
    assert fold_pass(_prepared(_shape_gather([5])), infer_shapes=True, size_threshold=FOLD_SIZE_THRESHOLD_BYTES) is None
    assert "shape folding raised IndexError" in caplog.text and "failed" not in caplog.text


def test_a_defect_in_the_shape_folding_is_a_warning_not_a_quiet_fallback(caplog, monkeypatch):
    def defect(self, name):
        raise KeyError("a defect of the fast path")

    monkeypatch.setattr(fast_fold._Fold, "_shape_gather", defect)
    caplog.set_level("DEBUG", logger="trtpipe.graph.fold.fast_fold")
    assert fold_pass(_prepared(_shape_gather([1, 0])), infer_shapes=True,
                     size_threshold=FOLD_SIZE_THRESHOLD_BYTES) is None
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "fast constant folding failed (KeyError" in warnings[0].getMessage()


def test_a_crash_of_the_fast_path_fails_the_differential_check(tmp_path, monkeypatch):
    import argparse

    from bench.same_output import same_output

    case = tmp_path / "inputs" / "sanitize" / "shapes"
    case.mkdir(parents=True)
    onnx.save(_shapes_and_constants(), str(case / "model.onnx"))
    args = argparse.Namespace(reference_path=False, stage="sanitize")
    loggers = [logging.getLogger(name) for name in ("trtpipe", "trtpipe.graph.fold.fast_fold")]
    levels = [logger.level for logger in loggers]
    try:
        same_output.run(tmp_path, "fast", args)

        def crash(self, infer_shapes):
            raise KeyError("a defect of the fast path")

        monkeypatch.setattr(fast_fold._Fold, "run", crash)
        same_output.run(tmp_path, "crashed", args)
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
    # The round trip wrote the same file after the crash: the bytes alone would pass.
    assert (tmp_path / "fast/sanitize/shapes/model.onnx").read_bytes() == \
        (tmp_path / "crashed/sanitize/shapes/model.onnx").read_bytes()
    assert same_output.compare(tmp_path, "fast", "fast", "sanitize") == 0
    assert same_output.compare(tmp_path, "fast", "crashed", "sanitize") == 1


def test_each_export_converts_element_types_afresh(monkeypatch):
    """STYLE: no global state. What graphsurgeon exports an element type as is cached for one export only:
    two passes over the same model each convert FLOAT once."""
    from trtpipe.graph.onnx_gs import gs_export

    calls = []

    def counted(elem_type):
        calls.append(elem_type)
        return original(elem_type)

    original = gs_export.get_numpy_type
    monkeypatch.setattr(gs_export, "get_numpy_type", counted)
    model = _prepared(_shapes_and_constants())
    for _ in range(2):
        assert fold_pass(onnx.ModelProto.FromString(model.SerializeToString()), infer_shapes=False,
                         size_threshold=FOLD_SIZE_THRESHOLD_BYTES) is not None
    assert calls.count(TensorProto.FLOAT) == 2
