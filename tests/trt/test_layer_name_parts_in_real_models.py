"""Layer-name parts that are not `<node>_<N>`: initializers, tensors and unnamed TensorRT layers.

The layer names are the real ones of tests/trt/data/inspector/; the model is built the way
exporters that name each node after its output tensor write it (node `Conv` -> tensor `Conv`,
weights deduplicated as `Conv_5`), so the `<node>_<N>` rule would map weights to nodes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tests.trt.test_real_inspector_files import DATA, ivit_document
from trtpipe.trt.inspect.audit import audit_engine
from trtpipe.trt.inspect.inspector_json import parse_engine_information
from trtpipe.trt.inspect.layer_names import layers_by_node, name_parts, nodes_of_layer

RESNET = parse_engine_information((DATA / "trex_resnet_a100_fp16.graph.json").read_text())
IVIT = parse_engine_information(ivit_document())
FUSED = "Conv_5 + Add_6 + Relu_7"  # a real layer of the resnet engine
UNNAMED = "(Unnamed Layer* 12) [Shuffle]"  # TensorRT's name for a layer created without one


def named_after_outputs() -> onnx.ModelProto:
    """x -> Conv (weights `Conv_5`) -> Add_6 -> Relu_7 -> Relu -> Relu_1 -> <UNNAMED> -> Flatten
    -> Gemm (weights `Gemm_48`) -> y; every node named after its output."""
    rng = np.random.RandomState(0)
    inits = [numpy_helper.from_array(rng.randn(4, 3, 1, 1).astype(np.float32), "Conv_5"),
             numpy_helper.from_array(rng.randn(16, 2).astype(np.float32), "Gemm_48"),
             numpy_helper.from_array(np.array([1, 4, 2, 2], np.int64), "shape")]
    spec = [("Conv", "Conv", ["x", "Conv_5"]), ("Add", "Add_6", ["Conv", "Conv"]), ("Relu", "Relu_7", ["Add_6"]),
            ("Relu", "Relu", ["Relu_7"]), ("Relu", "Relu_1", ["Relu"]), ("Reshape", UNNAMED, ["Relu_1", "shape"]),
            ("Flatten", "Flatten", [UNNAMED]), ("Gemm", "Gemm", ["Flatten", "Gemm_48"]), ("Identity", "y", ["Gemm"])]
    nodes = [helper.make_node(op, inputs, [name], name) for op, name, inputs in spec]
    graph = helper.make_graph(nodes, "named_after_outputs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _nodes(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {node.name: node for node in model.graph.node}


def test_the_model_is_real_and_its_nodes_are_named_after_their_outputs():
    model = named_after_outputs()
    assert all(node.name == node.output[0] for node in model.graph.node)
    x = np.random.RandomState(1).randn(1, 3, 2, 2).astype(np.float32)
    (y,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    w = numpy_helper.to_array(model.graph.initializer[0])[:, :, 0, 0]
    conv = np.maximum(2 * np.einsum("oc,bchw->bohw", w, x), 0)
    np.testing.assert_allclose(y, conv.reshape(1, 16) @ numpy_helper.to_array(model.graph.initializer[1]), rtol=1e-5)


def test_weights_named_like_node_suffixes_map_to_no_node():
    nodes = _nodes(named_after_outputs())
    layer_names = {layer.name for layer in RESNET.layers}
    assert FUSED in layer_names and "Gemm_48" in layer_names
    assert name_parts(FUSED) == ["Conv_5", "Add_6", "Relu_7"]
    # Conv_5 is the Conv's weights (a constant layer), not `Conv`'s extra layer; Gemm_48 is Gemm's weights.
    assert nodes_of_layer(FUSED, None, nodes) == ["Add_6", "Relu_7"]
    assert nodes_of_layer("Gemm_48", None, nodes) == []
    # Without the model's tensor names the rule cannot tell: a plain set of node names still maps it.
    assert nodes_of_layer("Gemm_48", None, set(nodes)) == ["Gemm"]


def test_a_suffix_is_not_read_where_the_model_names_nodes_base_n_itself():
    nodes = _nodes(named_after_outputs())
    # Relu and Relu_1 are both nodes: Relu_7 is itself a node, Relu_9 is ambiguous (not mapped).
    assert nodes_of_layer("Relu_7", None, nodes) == ["Relu_7"]
    assert nodes_of_layer("Relu_9", None, nodes) == []
    assert nodes_of_layer("Add_6_12", None, nodes) == ["Add_6"]  # unambiguous: the parser's extra layer


def test_unnamed_tensorrt_layers_are_never_mapped():
    nodes = _nodes(named_after_outputs())
    assert UNNAMED in nodes
    assert nodes_of_layer(f"{UNNAMED} + Relu_7", None, nodes) == ["Relu_7"]
    assert nodes_of_layer(UNNAMED, None, nodes) == []


def test_no_real_layer_is_mapped_through_a_part_that_is_a_weight_of_the_model():
    model = named_after_outputs()
    nodes, weights = _nodes(model), {i.name for i in model.graph.initializer}
    layers = [(layer.name, layer.metadata) for layer in (*RESNET.layers, *IVIT.layers)]
    carried = layers_by_node(layers, nodes)
    assert "Gemm" not in carried  # its only candidate, the real `Gemm_48` layer, is its weights
    assert FUSED not in carried["Conv"]  # `Conv_0 + Relu_1` etc. still read as Conv's extra layers
    for name, _ in layers:
        for part in name_parts(name):
            if part in weights:
                assert nodes_of_layer(part, None, nodes) == [], part
    assert {node for node, names in carried.items() if FUSED in names} == {"Add_6", "Relu_7"}


def test_the_audit_does_not_blame_a_node_for_its_weights_layer():
    model = named_after_outputs()
    plan = {"nodes": [{"name": n.name, "op_type": n.op_type, "precision": "fp32"} for n in model.graph.node]}
    tensors = {i.name for i in model.graph.initializer} | {t for n in model.graph.node for t in n.output}
    rows = {row.node: row for row in audit_engine(plan, RESNET, tensors=tensors)}
    assert rows["Gemm"].verdict == "absent"  # the FP16 `Gemm_48` layer is its weights, not the Gemm
    assert rows["Add_6"].engine_layer == FUSED and FUSED not in rows["Conv"].engine_layer.split(" | ")
