"""ONNX Runtime's message on one readable line (`ort_session.ort_reason`)."""

from __future__ import annotations

from trtpipe.numerics.ort_session import ort_reason

# What ONNX Runtime 1.32 said about onnx's test_dequantizelinear_e4m3fn_float16 (bench.corpus
# classified the 3,000-character line as unclear), shortened to three kernels' clauses per range.
KERNELS = [(10, 12)] * 3 + [(13, 18)] * 3 + [(19, 20)] * 2 + [(23, 23)] * 2 + [(25, 2147483647)] * 2
MESSAGE = ("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Failed to find kernel for DequantizeLinear(28) "
           "(node:'node_of_y' ep:'CPUExecutionProvider'). Op with name (node_of_y) domain () and type "
           "(DequantizeLinear) kernel is not supported in CPUExecutionProvider. Encountered following errors: ( "
           + " ".join(f"Version mismatch. node_version: 28 kernel start version: {a} kernel_end_version: {b}"
                      for a, b in KERNELS) + " )")


def test_kernel_version_clauses_are_said_once():
    line = ort_reason(RuntimeError(MESSAGE))
    assert line.count("Version mismatch") == 0
    assert line.endswith("its kernels' versions: 10-12, 13-18, 19-20, 23, 25 and later; the node's: 28")
    assert line.startswith("Failed to find kernel for DequantizeLinear(28) (node:'node_of_y'")
    assert len(line) < len(MESSAGE) / 2


def test_one_clause_is_left_as_onnx_runtime_wrote_it():
    one = "Failed. Version mismatch. node_version: 28 kernel start version: 10 kernel_end_version: 12"
    assert ort_reason(RuntimeError(one)) == one
