"""The inspector JSON of TensorRT 10.x and 11.x, parsed into one form.

The documents follow the documented schemas: 10.x tensors carry "Format/Datatype" and
the engine lists "Bindings"; 11.x splits the field into "Datatype" + "Format" and lists
"I/O Tensors" objects (TensorRT 11 migration guide; Polygraphy 0.53 extractors/_trt.py).
"""

from __future__ import annotations

import json

import pytest

from tests.trt.fake_tensorrt import layer, layers_10x, layers_11x, tensor_10x, tensor_11x
from trtpipe.errors import UserError
from trtpipe.trt.inspect.inspector_json import normalise_dtype, parse_engine_information

LN_NODES = ["/ln/ReduceMean", "/ln/Sub", "/ln/Pow", "/ln/ReduceMean_1", "/ln/Add", "/ln/Sqrt", "/ln/Div",
            "/ln/Mul", "/ln/Add_1"]


def myelin_10x() -> dict:
    """A Myelin ForeignNode that swallowed a decomposed LayerNorm, between two plain layers."""
    return layers_10x([
        layer("/proj/MatMul", "gemm", [tensor_10x("x", "Row major linear FP16 format")],
              [tensor_10x("h", "Row major linear FP16 format")], ["/proj/MatMul"]),
        layer("{ForeignNode[/ln/ReduceMean.../ln/Add_1]}", "Myelin", [tensor_10x("h", "Half")],
              [tensor_10x("ln_out", "Half")], LN_NODES),
        layer("/out/Cast", "Reformat", [tensor_10x("ln_out", "Row major linear FP16 format")],
              [tensor_10x("y", "Row major linear FP32")], ["/out/Cast"]),
    ], bindings=["x", "y"])


def myelin_11x() -> dict:
    return layers_11x([
        layer("/proj/MatMul", "gemm", [tensor_11x("x", "Half")], [tensor_11x("h", "Half")], ["/proj/MatMul"]),
        layer("{ForeignNode[/ln/ReduceMean.../ln/Add_1]}", "kgen", [tensor_11x("h", "Half")],
              [tensor_11x("ln_out", "Half")], LN_NODES, separator="\x1f"),
        layer("/out/Cast", "Reformat", [tensor_11x("ln_out", "Half")], [tensor_11x("y", "Float")], ["/out/Cast"]),
    ], io=[("x", "Input", "Half"), ("y", "Output", "Float")])


@pytest.mark.parametrize("document, schema", [(myelin_10x(), "10.x"), (myelin_11x(), "11.x")])
def test_both_schemas_parse_to_the_same_common_form(document, schema):
    engine = parse_engine_information(json.dumps(document))
    assert engine.schema == schema
    assert [l.name for l in engine.layers] == ["/proj/MatMul", "{ForeignNode[/ln/ReduceMean.../ln/Add_1]}", "/out/Cast"]
    myelin = engine.layers[1]
    assert myelin.onnx_nodes == tuple(LN_NODES)  # every swallowed node, whatever the separator
    assert myelin.fused and myelin.is_myelin
    assert [t.dtype for t in myelin.inputs] == ["fp16"] and [t.dtype for t in myelin.outputs] == ["fp16"]
    assert engine.layers[2].outputs[0].dtype == "fp32"
    assert not engine.layers[0].fused
    assert set(engine.io_tensors) == {"x", "y"}


def test_11x_io_tensors_carry_their_types_and_10x_bindings_only_names():
    assert parse_engine_information(json.dumps(myelin_11x())).io_tensors == {"x": "fp16", "y": "fp32"}
    assert parse_engine_information(json.dumps(myelin_10x())).io_tensors == {"x": None, "y": None}


@pytest.mark.parametrize("text, dtype", [
    ("Row major linear FP32", "fp32"), ("Row major linear FP16 format", "fp16"),
    ("Channel major FP16 format where channel % 8 == 0", "fp16"), ("Half", "fp16"), ("Float", "fp32"),
    ("BFloat16", "bf16"), ("Row major linear BFloat16 format", "bf16"), ("Int32", "int32"),
    ("Row major linear Int64 format", "int64"), ("Row major linear BOOL", "bool"), ("FP8", "fp8"),
    ("Row major linear FP32 format (kLINEAR)", "fp32"), ("Unknown format", None), ("", None),
])
def test_type_text_of_either_schema_is_normalised(text, dtype):
    assert normalise_dtype(text) == dtype


def test_the_11x_datatype_decides_even_when_the_format_names_another_type():
    engine = parse_engine_information(json.dumps(layers_11x([
        layer("a", "Reformat", [tensor_11x("x", "Half", "Row major linear FP32 format (kLINEAR)")], [])])))
    assert engine.layers[0].inputs[0].dtype == "fp16"


def test_layers_of_other_profiles_are_left_out():
    document = layers_10x([layer("/a/Relu", "Activation", [], [tensor_10x("y", "Float")], ["/a/Relu"]),
                           layer("/a/Relu [profile 1]", "Activation", [], [tensor_10x("y [profile 1]", "Float")])],
                          bindings=["x", "y", "x [profile 1]", "y [profile 1]"])
    engine = parse_engine_information(json.dumps(document))
    assert [l.name for l in engine.layers] == ["/a/Relu"] and set(engine.io_tensors) == {"x", "y"}


def test_metadata_with_local_function_stacks_names_the_node():
    document = layers_10x([{"Name": "L", "LayerType": "Reduce", "Inputs": [], "Outputs": [],
                            "Metadata": "[ONNX Layer: /f/ReduceMean | /outer (MyFunction)]"}])
    assert parse_engine_information(json.dumps(document)).layers[0].onnx_nodes == ("/f/ReduceMean",)


def test_names_only_layer_information_asks_for_detailed_verbosity():
    with pytest.raises(UserError, match="DETAILED"):
        parse_engine_information(json.dumps({"Layers": ["a", "b"], "Bindings": ["x"]}))


def test_not_json_is_a_clear_error():
    with pytest.raises(UserError, match="not JSON"):
        parse_engine_information("Layers: a")
