"""trtpipe/trt/rtx/engine_program.py on a real program: data/rtx_engine_program_int8.txt is the
declarations part of the Myelin program of an engine the real TensorRT-RTX 1.7.1 builder made (sm89,
through bench/rtx's oracle) from trtpipe's default output of ONNX Runtime's QDQ model of a small CNN
(tests/precision/qdq_models.py `ort_quantized_pair`): two Conv and one Gemm, INT8, the rest FP16.
Cut out verbatim (the kernel sources that follow it left out); its layer lists are separated by the
engine's own 0x1f bytes. The rtx tier (tests/test_rtx_oracle_quantized_layers.py) reads whole engines.
"""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import helper

from trtpipe.trt.rtx import engine_program

PROGRAM = Path(__file__).parent / "data" / "rtx_engine_program_int8.txt"


@pytest.fixture(scope="module")
def program():
    return engine_program.read(PROGRAM.read_bytes())


def test_linear_ops_with_their_operand_types_through_sub_tensors(program):
    linear = {op.name: (op.kind, op.types, op.quantized) for op in program.linear}
    assert linear == {"c1": ("corrltn", "int8xint8", True), "c2": ("corrltn", "int8xint8", True),
                      "fc": ("fully_connected", "int8xint8", True)}   # fc's activation is a sub_tensor


def test_kernels_name_their_onnx_layers_and_output_types(program):
    kernels = program.kernels
    assert len(kernels) == 4
    last = kernels[-1]
    assert last.layers == ("fc", "f_DequantizeLinear", "fc_w_DequantizeLinear", "y_QuantizeLinear",
                           "y_DequantizeLinear")
    assert last.output_types == ("float",)
    assert kernels[1].output_types == ("int8",) and "c1_relu" in kernels[1].layers


def test_a_float_operand_is_not_quantized():
    """c2's weight declared FP32 instead of INT8: c2 reads int8xfloat and is no longer quantized."""
    text = PROGRAM.read_text(encoding="latin-1")
    line = next(ln for ln in text.splitlines() if 'name="__mye1537dconst"' in ln)
    changed = text.replace(line, line.replace("type=int8", "type=float"))
    assert changed != text
    ops = {op.name: op for op in engine_program.read(changed.encode("latin-1")).linear}
    assert (ops["c2"].types, ops["c2"].quantized) == ("int8xfloat", False)
    assert ops["c1"].quantized and ops["fc"].quantized


def test_engine_bytes_of_an_embedded_and_a_separate_epcontext(tmp_path):
    engine = b"engine bytes"
    (tmp_path / "engine.bin").write_bytes(engine)
    for embed, context in ((1, engine), (0, b"engine.bin")):
        node = helper.make_node("EPContext", ["x"], ["y"], domain="com.microsoft", embed_mode=embed,
                                ep_cache_context=context)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                                  [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
        onnx.save(helper.make_model(graph), str(tmp_path / f"ctx{embed}.onnx"))
        assert engine_program.engine_bytes(tmp_path / f"ctx{embed}.onnx") == engine
    graph = helper.make_graph([], "g", [], [])
    onnx.save(helper.make_model(graph), str(tmp_path / "none.onnx"))
    with pytest.raises(ValueError, match="no EPContext node"):
        engine_program.engine_bytes(tmp_path / "none.onnx")


def test_the_comparison_names_lost_layers_and_fp16_ops_run_fp32():
    """bench/rtx/quantized_layers.compare on the same real program: against itself nothing is found;
    with c2's operands declared FP32 c2 is lost and, planned FP16, runs FP32; a kernel of planned-FP16
    nodes that writes FP32 is named too."""
    from bench.rtx.quantized_layers import compare

    source = engine_program.read(PROGRAM.read_bytes())
    plan = {"nodes": [{"name": n, "precision": "fp16"} for n in ("c1", "c2", "fc", "c1_relu", "c1_o_QuantizeLinear",
                                                                  "c1_r_QuantizeLinear", "c1_o_DequantizeLinear")]}
    same = compare(source, source, plan)
    assert same.ok and same.source_quantized == same.output_quantized == ("c1", "c2", "fc")
    text = PROGRAM.read_text(encoding="latin-1")
    for name in ("__mye1537dconst", "__mye1135c2_o_before_bias.1_4"):   # c2's weight and activation
        line = next(ln for ln in text.splitlines() if f'name="{name}"' in ln)
        text = text.replace(line, line.replace("type=int8", "type=float"))
    # c1's kernel (its layers all planned FP16 above) writes FP32 instead of its INT8 codes.
    kernel = next(ln for ln in text.splitlines() if "__myl_MulCastAddMulMinMaxRounCastCastMulReluMulMinMaxRounCast " in ln)
    output = kernel.split('output_args={ "')[1].split('"')[0]
    declared = next(ln for ln in text.splitlines() if f'name="{output}"' in ln and ln.startswith("  tensor="))
    text = text.replace(declared, declared.replace("type=int8", "type=float"))
    found = compare(source, engine_program.read(text.encode("latin-1")), plan)
    assert found.lost == ("c2 (int8xint8 -> floatxfloat)",)
    assert found.fell_back[0] == "c2 [corrltn]: operands floatxfloat"
    assert len(found.fell_back) == 2 and "writes float" in found.fell_back[1]
    assert compare(source, engine_program.read(text.encode("latin-1"))).fell_back == ()   # no plan: not checked
