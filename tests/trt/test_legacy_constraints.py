"""Legacy constraints mode (TensorRT 10.x): the plan's precision reaches every layer of a
node - the `<node>_<N>` layers the parser adds and helper layers known by their metadata."""

from __future__ import annotations

from trtpipe.trt.inspect.layer_names import layers_by_node, nodes_of_layer, onnx_nodes_in_metadata
from trtpipe.trt.legacy import LayerView, constraints_summary, legacy_constraints

PLAN = {"nodes": [{"name": "/ln/Pow", "precision": "fp32"}, {"name": "/ln/ReduceMean", "precision": "fp32"},
                  {"name": "/proj/MatMul", "precision": "fp16"}, {"name": "/cast", "precision": "keep"},
                  {"name": "/shape/Gather", "precision": "none"}]}


def test_layers_map_to_nodes_by_metadata_then_name_then_node_suffix():
    nodes = {"/ln/Pow", "/ln/ReduceMean", "/a", "/a_1"}
    assert nodes_of_layer("/ln/Pow", None, nodes) == ["/ln/Pow"]
    assert nodes_of_layer("/ln/Pow_12", None, nodes) == ["/ln/Pow"]  # N comes from one network-wide counter
    assert nodes_of_layer("/a_1", None, nodes) == ["/a_1"]  # a node literally named so wins
    assert nodes_of_layer("ONNXTRT_castHelper_3", "[ONNX Layer: /ln/Pow]", nodes) == ["/ln/Pow"]
    assert nodes_of_layer("ONNXTRT_Broadcast_4", None, nodes) == []
    assert onnx_nodes_in_metadata("[ONNX Layer: a]\x1f[ONNX Layer: b | f (Fn)]\x1e[ONNX Layer: a]") == ["a", "b"]
    assert layers_by_node([("/ln/Pow", None), ("/ln/Pow_12", None), ("x", "[ONNX Layer: /a]")], nodes) == {
        "/ln/Pow": ["/ln/Pow", "/ln/Pow_12"], "/a": ["x"]}


def test_every_layer_of_a_node_gets_its_precision_and_float_output_types():
    layers = [
        LayerView("/ln/Pow", "[ONNX Layer: /ln/Pow]", "ELEMENTWISE", ("fp32",)),
        LayerView("/ln/Pow_17", "[ONNX Layer: /ln/Pow]", "ELEMENTWISE", ("fp32",)),  # extra layer of the node
        LayerView("ONNXTRT_castHelper_18", "[ONNX Layer: /ln/Pow]", "CAST", ("fp32",)),  # helper via metadata
        LayerView("/ln/ReduceMean_4", None, "REDUCE", ("fp32", "int32")),  # suffix only, no metadata
        LayerView("/proj/MatMul", "[ONNX Layer: /proj/MatMul]", "MATRIX_MULTIPLY", ("fp32",)),
        LayerView("/proj/MatMul_2", "[ONNX Layer: /proj/MatMul]", "CONSTANT", ("fp16",)),  # constants stay free
        LayerView("/cast", "[ONNX Layer: /cast]", "CAST", ("fp16",)),  # kept as authored: no constraint
        LayerView("/shape/Gather", "[ONNX Layer: /shape/Gather]", "GATHER", ("int64",)),
        LayerView("ONNXTRT_Broadcast_9", None, "SHUFFLE", ("fp32",)),  # names no node
    ]
    constraints, unmapped = legacy_constraints(layers, PLAN)
    assert {name: (c.precision, c.float_outputs) for name, c in constraints.items()} == {
        "/ln/Pow": ("fp32", (0,)), "/ln/Pow_17": ("fp32", (0,)), "ONNXTRT_castHelper_18": ("fp32", (0,)),
        "/ln/ReduceMean_4": ("fp32", (0,)), "/proj/MatMul": ("fp16", (0,))}
    assert unmapped == ["ONNXTRT_Broadcast_9"]
    summary = constraints_summary(constraints, unmapped)
    assert "precision set on 5 layer(s) (1 fp16, 4 fp32)" in summary
    assert "/ln/Pow_17 <- /ln/Pow" in summary and "ONNXTRT_castHelper_18 <- /ln/Pow" in summary
    assert "ONNXTRT_Broadcast_9" in summary


def test_a_layer_fused_from_fp32_and_fp16_nodes_is_kept_fp32():
    layers = [LayerView("mix", "[ONNX Layer: /proj/MatMul]\x1e[ONNX Layer: /ln/Pow]", "ELEMENTWISE", ("fp32",))]
    constraints, _ = legacy_constraints(layers, PLAN)
    assert constraints["mix"].precision == "fp32" and constraints["mix"].nodes == ("/proj/MatMul", "/ln/Pow")
