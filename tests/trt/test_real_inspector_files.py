"""Real engine-inspector output (tests/trt/data/inspector/, origins in ORIGIN.json) through the
parser, the layer -> ONNX-node mapping and the precision audit, layer by layer."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from trtpipe.trt.inspect.audit import audit_engine
from trtpipe.trt.inspect.inspector_json import parse_engine_information
from trtpipe.trt.inspect.layer_names import nodes_of_layer

DATA = Path(__file__).parent / "data" / "inspector"

# The ONNX graph of torchvision's resnet18 as PyTorch's legacy exporter names it (<OpType>_<index>),
# the model the TensorRT Engine Explorer example was built from.
RESNET18_NODES = (
    "Conv_0 Relu_1 MaxPool_2 Conv_3 Relu_4 Conv_5 Add_6 Relu_7 Conv_8 Relu_9 Conv_10 Add_11 Relu_12 Conv_13 "
    "Relu_14 Conv_15 Conv_16 Add_17 Relu_18 Conv_19 Relu_20 Conv_21 Add_22 Relu_23 Conv_24 Relu_25 Conv_26 "
    "Conv_27 Add_28 Relu_29 Conv_30 Relu_31 Conv_32 Add_33 Relu_34 Conv_35 Relu_36 Conv_37 Conv_38 Add_39 "
    "Relu_40 Conv_41 Relu_42 Conv_43 Add_44 Relu_45 GlobalAveragePool_46 Flatten_47 Gemm_48").split()
REFORMAT = []  # TensorRT's own format conversions implement no node
RESNET_MAPPING = [
    ("Reformatting CopyNode for Input Tensor 0 to Conv_0 + Relu_1", REFORMAT),
    ("Conv_0 + Relu_1", ["Conv_0", "Relu_1"]),
    ("MaxPool_2", ["MaxPool_2"]),
    ("Conv_3 + Relu_4", ["Conv_3", "Relu_4"]),
    ("Reformatting CopyNode for Input Tensor 0 to Conv_5 + Add_6 + Relu_7", REFORMAT),
    ("Reformatting CopyNode for Input Tensor 1 to Conv_5 + Add_6 + Relu_7", REFORMAT),
    ("Conv_5 + Add_6 + Relu_7", ["Conv_5", "Add_6", "Relu_7"]),
    ("Reformatting CopyNode for Input Tensor 0 to Conv_8 + Relu_9", REFORMAT),
    ("Conv_8 + Relu_9", ["Conv_8", "Relu_9"]),
    ("Reformatting CopyNode for Input Tensor 0 to Conv_10 + Add_11 + Relu_12", REFORMAT),
    ("Conv_10 + Add_11 + Relu_12", ["Conv_10", "Add_11", "Relu_12"]),
    ("Conv_13 + Relu_14", ["Conv_13", "Relu_14"]),
    ("Conv_15", ["Conv_15"]),
    ("Conv_16 + Add_17 + Relu_18", ["Conv_16", "Add_17", "Relu_18"]),
    ("Conv_19 + Relu_20", ["Conv_19", "Relu_20"]),
    ("Conv_21 + Add_22 + Relu_23", ["Conv_21", "Add_22", "Relu_23"]),
    ("Reformatting CopyNode for Input Tensor 0 to Conv_24 + Relu_25", REFORMAT),
    ("Conv_24 + Relu_25", ["Conv_24", "Relu_25"]),
    ("Reformatting CopyNode for Input Tensor 0 to Conv_26", REFORMAT),
    ("Conv_26", ["Conv_26"]),
    ("Conv_27 + Add_28 + Relu_29", ["Conv_27", "Add_28", "Relu_29"]),
    ("Reformatting CopyNode for Output Tensor 0 to Conv_27 + Add_28 + Relu_29", REFORMAT),
    ("Conv_30 + Relu_31", ["Conv_30", "Relu_31"]),
    ("Conv_32 + Add_33 + Relu_34", ["Conv_32", "Add_33", "Relu_34"]),
    ("Conv_35 + Relu_36", ["Conv_35", "Relu_36"]),
    ("Conv_37", ["Conv_37"]),
    ("Conv_38 + Add_39 + Relu_40", ["Conv_38", "Add_39", "Relu_40"]),
    ("Reformatting CopyNode for Input Tensor 0 to Conv_41 + Relu_42", REFORMAT),
    ("Conv_41 + Relu_42", ["Conv_41", "Relu_42"]),
    ("Reformatting CopyNode for Input Tensor 0 to Conv_43 + Add_44 + Relu_45", REFORMAT),
    ("Conv_43 + Add_44 + Relu_45", ["Conv_43", "Add_44", "Relu_45"]),
    ("GlobalAveragePool_46", ["GlobalAveragePool_46"]),
    ("Gemm_48", ["Gemm_48"]),
    ("Reformatting CopyNode for Input Tensor 0 to reshape_after_Gemm_48", REFORMAT),
    ("reshape_after_Gemm_48", []),  # TensorRT's reshape after the FullyConnected: no ONNX node
    ("Reformatting CopyNode for Output Tensor 0 to reshape_after_Gemm_48", REFORMAT),
]
SEP = "\x1f"
IVIT_MAPPING = [
    ("__mye196_0_myl0_0", "shape_call", []),
    ("__myl_ReplConcMulMinMaxRounCast_myl0_1", "kgen", ["/input_q/QuantizeLinear"]),
    ("/fc1/MatMul_myl0_2", "gemm", ["/fc1/MatMul", "/input_q/DequantizeLinear", "/fc1/DequantizeLinear",
                                    "/act_q/QuantizeLinear", "/fc1/Transpose", "/fc1/QuantizeLinear"]),
    ("/fc2/MatMul_myl0_3", "gemm", ["/fc2/MatMul", "/act_q/DequantizeLinear", "/fc2/DequantizeLinear",
                                    "/act_q2/QuantizeLinear", "/fc2/Transpose", "/fc2/QuantizeLinear"]),
    ("/fc3/MatMul_myl0_4", "gemm", ["/fc3/MatMul", "/act_q2/DequantizeLinear", "/fc3/DequantizeLinear",
                                    "/act_q3/QuantizeLinear", "/fc3/Transpose", "/fc3/QuantizeLinear"]),
    ("__myl_CastMulSlic_myl0_5", "kgen", ["/act_q3/DequantizeLinear"]),
]


def test_the_files_are_the_recorded_ones():
    origin = json.loads((DATA / "ORIGIN.json").read_text())
    assert sorted(origin) == sorted(p.name for p in DATA.iterdir() if p.name not in ("ORIGIN.json", "README.md"))
    for name, facts in origin.items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == facts["sha256"]
        assert facts["repository"] and re.fullmatch(r"[0-9a-f]{40}", facts["commit"]) and facts["licence"]


def test_trex_resnet_fp16_maps_every_layer_by_its_fused_name():
    engine = parse_engine_information((DATA / "trex_resnet_a100_fp16.graph.json").read_text())
    assert engine.schema == "10.x" and set(engine.io_tensors) == {"input.1", "191"}
    nodes = set(RESNET18_NODES)
    assert [(layer.name, nodes_of_layer(layer.name, layer.metadata, nodes)) for layer in engine.layers] == RESNET_MAPPING
    assert not any(layer.onnx_nodes for layer in engine.layers)  # TensorRT 8.4: no Metadata
    fused = {layer.name for layer in engine.layers if layer.fused}
    assert fused == {name for name, carried in RESNET_MAPPING if len(carried) > 1}


def test_trex_resnet_fp16_audit_finds_the_fp16_convolutions():
    engine = parse_engine_information((DATA / "trex_resnet_a100_fp16.graph.json").read_text())
    plan = {"nodes": [{"name": n, "op_type": n.split("_")[0], "precision": "fp32"} for n in RESNET18_NODES]}
    rows = {row.node: row for row in audit_engine(plan, engine)}
    assert len(rows) == len(RESNET18_NODES)
    conv = rows["Conv_0"]
    assert (conv.engine_layer, conv.fused, conv.verdict) == ("Conv_0 + Relu_1", True, "violation")
    assert conv.realised == "fp16" and "Conv_0 + Relu_1:fp16" in conv.evidence
    assert rows["Relu_1"].engine_layer == "Conv_0 + Relu_1"
    assert rows["Flatten_47"].verdict == "absent"  # folded into the FullyConnected: no layer names it
    carried = {node for _, nodes in RESNET_MAPPING for node in nodes}
    assert {n for n, row in rows.items() if row.verdict != "absent"} == carried
    # Every layer's realised types come from the file's own "Format/Datatype" text.
    texts = {t.description: t.dtype for layer in engine.layers for t in (*layer.inputs, *layer.outputs)}
    assert texts["Row major linear FP32"] == "fp32"
    assert texts["Channel major FP16 format where channel % 8 == 0"] == "fp16"


def ivit_document() -> str:
    """The per-layer objects of get_layer_information(i), assembled into one engine document."""
    text = (DATA / "ivit_simple_mlp_int8.layers.txt").read_text()
    layers = [json.loads(chunk) for chunk in re.split(r"^--- Layer \d+ ---$", text, flags=re.MULTILINE) if chunk.strip()]
    return json.dumps({"Layers": layers})


def test_ivit_myelin_layers_list_their_nodes_in_the_metadata():
    engine = parse_engine_information(ivit_document())
    assert engine.schema == "10.x"
    assert [(layer.name, layer.layer_type, list(layer.onnx_nodes)) for layer in engine.layers] == IVIT_MAPPING
    assert all(SEP in layer.metadata for layer in engine.layers if len(layer.onnx_nodes) > 1)
    every = {node for _, _, nodes in IVIT_MAPPING for node in nodes}
    for layer, (_, _, nodes) in zip(engine.layers, IVIT_MAPPING):
        # The metadata decides even where the name looks like `<node>_<N>` (`/fc1/MatMul_myl0_2`).
        assert nodes_of_layer(layer.name, layer.metadata, every) == nodes
    assert [t.dtype for layer in engine.layers for t in layer.outputs] == ["int8", "int8", "int8", "int8", "fp32"]


def test_ivit_audit_reads_fp32_where_seen_and_unknown_inside_int8_gemms():
    engine = parse_engine_information(ivit_document())
    plan = {"nodes": [{"name": "/act_q3/DequantizeLinear", "op_type": "DequantizeLinear", "precision": "fp32"},
                      {"name": "/fc1/MatMul", "op_type": "MatMul", "precision": "fp32"},
                      {"name": "/input_q/QuantizeLinear", "op_type": "QuantizeLinear", "precision": "fp32"},
                      {"name": "/head/Softmax", "op_type": "Softmax", "precision": "fp32"}]}
    rows = {row.node: row for row in audit_engine(plan, engine, {"/act_q3/DequantizeLinear": ["logits"]})}
    assert (rows["/act_q3/DequantizeLinear"].verdict, rows["/act_q3/DequantizeLinear"].evidence) == \
        ("ok", "node output(s) logits:fp32")
    assert (rows["/fc1/MatMul"].engine_layer, rows["/fc1/MatMul"].fused, rows["/fc1/MatMul"].verdict) == \
        ("/fc1/MatMul_myl0_2", True, "unknown")  # Int8 in, Int8 out: no float type to read
    assert (rows["/input_q/QuantizeLinear"].realised, rows["/input_q/QuantizeLinear"].verdict) == ("fp32", "ok")
    assert rows["/head/Softmax"].verdict == "absent"


def _keys(document: dict) -> set[str]:
    keys = set(document)
    for layer in document["Layers"]:
        keys |= set(layer)
        for tensor in (*layer.get("Inputs", []), *layer.get("Outputs", [])):
            keys |= {f"tensor.{key}" for key in tensor}
    return keys


def test_the_test_double_writes_no_10x_key_the_real_output_lacks():
    """The double's 10.x documents (tests/trt/fake_tensorrt.py) use only keys real 10.x-schema files have.
    (No real 11.x file was found; the double's 11.x form follows the migration guide.)"""
    from tests.trt.fake_tensorrt import layer, layers_10x, tensor_10x

    real = _keys(json.loads((DATA / "trex_resnet_a100_fp16.graph.json").read_text())) | _keys(json.loads(ivit_document()))
    fake = _keys(layers_10x([layer("a", "kgen", [tensor_10x("x", "Half")], [tensor_10x("y", "Float")], onnx_nodes=["n"])]))
    assert fake <= real, sorted(fake - real)
