"""Parts of the TensorRT-RTX oracle (bench/rtx) that need no wheel: reading trtpipe's refusal,
its profile, and the parser's refused op out of real-format text."""
from __future__ import annotations

from bench.rtx import check, subjects
from trtpipe.trt.rtx import parser_log


def test_the_op_check_refusal_names_every_op_of_trtpipes_message():
    message = ("TensorRT 11.1's ONNX parser cannot import 3 op(s) of this model: ConvInteger (21 nodes: Conv_0_quant, "
               "Conv_3_quant, ...); DynamicQuantizeLinear (1 node: q); com.microsoft.DynamicQuantizeLSTM (1 node: "
               "LSTM_202_quant). Fix: export the float model")
    ops = [m["op"] for m in subjects._OP.finditer(subjects._REFUSED.search(message)["ops"])]
    assert ops == ["ConvInteger", "DynamicQuantizeLinear", "com.microsoft.DynamicQuantizeLSTM"]


def test_the_first_profile_of_the_trtexec_command_reaches_the_ep(tmp_path):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "trtexec.txt").write_text(
        "# TensorRT 10.x\ntrtexec \\\n    --onnx=../precision/model.onnx \\\n    --minShapes=x:1x3x48x32,s:2 \\\n"
        "    --optShapes=x:1x3x48x320,s:2 \\\n    --maxShapes=x:4x3x48x1280,s:2 \\\n    --noTF32\n"
        "# TensorRT 11.x\ntrtexec \\\n    --minShapes=x:9x9 \\\n    --optShapes=x:9x9 \\\n    --maxShapes=x:9x9\n")
    assert check.profile_shapes(tmp_path) == ["x:1x3x48x32,s:2", "x:1x3x48x320,s:2", "x:4x3x48x1280,s:2"]
    (tmp_path / "build" / "trtexec.txt").write_text("trtexec \\\n    --onnx=m.onnx \\\n    --stronglyTyped\n")
    assert check.profile_shapes(tmp_path) is None


def test_the_refused_op_is_the_parsers_node_and_a_cuda_error_after_it_is_no_reason():
    stamp = "2026-11-26 20:25:38.886 [E:onnxruntime:, tensorrt_rtx_execution_provider.h:214 log] [2026-11-26 20:25:38   ERROR] "
    text = "\n".join([
        stamp + "IBuilder::buildSerializedNetworkToStream: Error Code 4: Internal Error (kOPT values violate)",
        stamp + "[checkMacros.cpp::catchCudaError::250] Error Code 1: Cuda Runtime (cudaError 35: CUDA driver version)",
        stamp + 'ModelImporter.cpp:140: While parsing node number 35 [LSTM -> "y"]:'])
    log = parser_log.read(text)
    assert parser_log.refused_op(log) == "LSTM"
    assert "catchCudaError" not in parser_log.reason(log, "")
    assert "kOPT values violate" in parser_log.reason(log, "")


def test_a_parser_error_of_the_eps_standalone_parse_of_an_if_body_is_not_the_builders_reason():
    """The EP parses each If body alone first (an outer-scope value of unknown shape arrives as a
    rank-0 input, so an LSTM there fails), then parses the whole model and hands it to the
    builder: the reason of a failed engine build is the builder's line after the last node."""
    from tests.trt.recurrent_models import recurrent_model
    from trtpipe.trt.parser import builder_limits

    stamp = "2026-11-26 21:14:56.447 [E:onnxruntime:, tensorrt_rtx_execution_provider.h:214 log] [2026-11-26 21:14:56   ERROR] "
    node = "2026-11-26 21:14:56.450 [W:onnxruntime:, tensorrt_rtx_execution_provider.h:214 log] [2026-11-26 21:14:56 UNKNOWN] "
    assertion = ("[graphScope.cpp::analyze::471] Error Code 2: Internal Error (Assertion tScope.getType() != "
                 "ScopeType::kUNDEFINED failed.  In analyze at /_src/optimizer/common/graphScope.cpp:471)")
    text = "\n".join([
        stamp + 'ModelImporter.cpp:140: While parsing node number 35 [LSTM -> "y"]:',
        stamp + "ModelImporter.cpp:151: ERROR: ModelImporter.cpp:489 In function parseNode: [6] Invalid Node - if/then_branch/lstm",
        node + "if/then_branch/lstm [LSTM] inputs: [x -> (3, 1, 4)[FLOAT]], ",
        node + "if/then_branch/lstm [LSTM] outputs: [y_h -> (1, 1, 8)[FLOAT]], ",
        stamp + assertion,
        stamp + "[checkMacros.cpp::catchCudaError::250] Error Code 1: Cuda Runtime (cudaError 35)"])
    log = parser_log.read(text)
    assert log.parser_error and parser_log.refused_op(log) == "LSTM"   # what the verdict used to be read from
    reason = parser_log.builder_reason(log, "Failed to create serialized engine for fused node: x")
    assert reason == " ".join(assertion.split())
    assert builder_limits.attribute(reason, recurrent_model("LSTM", name_y=True)) == "LSTM"
    assert builder_limits.attribute(reason, recurrent_model("LSTM", read_y=True)) == ""
    assert builder_limits.attribute("IBuilder::buildSerializedNetworkToStream: kOPT", recurrent_model("LSTM")) == ""


def test_a_predicted_builder_refusal_counts_and_an_unpredicted_one_does_not():
    run = subjects.TrtpipeRun(None, 2)
    run.refused_ops = ["LSTM"]
    result = check.ModelResult("m", verdict="parsed, refused by the builder", refused_op="LSTM", trtpipe=run)
    assert result.counts and "refused it first: LSTM" in result.line()
    result.trtpipe = subjects.TrtpipeRun(None, 0)
    assert not result.counts and "NOT predicted" in result.line()
