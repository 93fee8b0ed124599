"""The quantizers: NVIDIA ModelOpt's ONNX PTQ (INT8, FP8) and ONNX Runtime's `quantize_static` (QDQ).

- `modelopt_int8`, `modelopt_fp8`: `python -m modelopt.onnx.quantization --quantize_mode int8|fp8
  --calibration_data_path calibration.npz --calibration_eps cpu --high_precision_dtype fp32`, run by
  the bench extra's Python (ModelOpt is never a run-time dependency). `--high_precision_dtype fp32`:
  the rest of the model stays FP32, so making it FP16 is the step under test (trtpipe's or AutoCast's),
  not ModelOpt's own conversion; everything else is ModelOpt's default (entropy calibration for INT8,
  max for FP8; its choice of which ops to quantize).
- `ort_qdq`: ONNX Runtime's `quantize_static` in QDQ format, INT8 weights and activations, per channel,
  symmetric (TensorRT's INT8 takes zero points of 0), the linear ops only (Conv, Gemm, MatMul: what
  TensorRT runs quantized; ONNX Runtime's default would also quantize Add, Gather, Softmax ... whose Q/DQ
  TensorRT only fuses away), biases as ONNX Runtime writes them (INT32 through a DequantizeLinear).
  First ONNX Runtime's own pre-processing, as its warning asks (`quant_pre_process`: its optimizer
  folds BatchNormalization into the Conv before it, so the convs get biases, quantized INT32 as
  above; its symbolic shape inference is skipped: it asserts on the Paddle exports' Concat, and the
  shapes here are static). Calibrated with MinMax on the same data.

Each quantized model is made once in the work folder and reused.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
from onnx import version_converter

QUANTIZERS = ("modelopt_int8", "modelopt_fp8", "ort_qdq")
PER_CHANNEL_OPSET = 13
REPO = Path(__file__).resolve().parents[2]


def quantized_model(quantizer: str, float_path: Path, calibration: Path, bench_python: str) -> Path:
    target = float_path.with_name(f"{quantizer}.onnx")
    if target.is_file():
        return target
    tmp = target.with_suffix(".tmp.onnx")
    if quantizer == "ort_qdq":
        _ort(float_path, calibration, tmp)
    else:
        mode = quantizer.split("_")[1]
        done = subprocess.run([bench_python, "-m", "modelopt.onnx.quantization", "--onnx_path", str(float_path),
                               "--quantize_mode", mode, "--calibration_data_path", str(calibration),
                               "--calibration_eps", "cpu", "--high_precision_dtype", "fp32",
                               "--output_path", str(tmp)], capture_output=True, text=True, cwd=REPO)
        if done.returncode != 0 or not tmp.is_file():
            raise RuntimeError(f"ModelOpt {mode} failed on {float_path}: {done.stderr.strip()[-600:]}")
    tmp.replace(target)
    return target


def _ort(float_path: Path, calibration: Path, out: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = out.with_name(out.stem + ".pre.onnx")
    model = onnx.load(str(float_path))
    if _opset(model) < PER_CHANNEL_OPSET:
        # Per-channel DequantizeLinear (`axis`) exists from opset 13; onnxruntime 1.32's quantize_static
        # writes one for every INT32 bias of an opset-11 model all the same (ONNX Runtime then refuses
        # to load it), so the model is converted first, as its per-channel documentation asks.
        model = version_converter.convert_version(model, PER_CHANNEL_OPSET)
    onnx.save(model, str(prepared))
    quant_pre_process(str(prepared), str(prepared), skip_symbolic_shape=True)

    data = dict(np.load(calibration))
    count = len(next(iter(data.values())))

    class Samples(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{name: values[i:i + 1] for name, values in data.items()} for i in range(count)])

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(str(prepared), str(out), Samples(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    op_types_to_quantize=["Conv", "Gemm", "MatMul"],
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    prepared.unlink()


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
