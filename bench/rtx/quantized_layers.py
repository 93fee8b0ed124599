"""Does trtpipe's output keep a quantized model quantized? Both engines through the oracle (issue 31, item 3).

    layers = quantized_layers.compare(source_program, output_program, plan)

The source model (the QDQ model as the quantizer wrote it) and trtpipe's output (precision/model.onnx)
are each built by the real TensorRT-RTX 1.7.1 builder (`build_program`: bench/rtx/compile_one.py in the
fake-GPU sandbox), and the Myelin program of each engine is read (trtpipe/trt/rtx/engine_program.py).
Two findings fail the check:

- `lost`: a linear op (conv, FC, matmul, attention) whose two operands are INT8/FP8 in the source's
  engine and not in the output's (or that the output's engine no longer holds as a linear op);
- `fell_back`: an op the plan made FP16 that the engine runs in FP32: a linear op whose ONNX node is
  planned `fp16` and whose operands are FP32 (a quantized one reads INT8/FP8, an FP16 one HALF), or a
  generated kernel made only of planned-`fp16` nodes that writes an FP32 tensor.

Ops are matched by name: a linear op is named after its ONNX node, which trtpipe keeps (the plan is
keyed by it). What the check cannot see, it does not claim: a small Gemm Myelin fuses into a pointwise
kernel is not a linear op in either engine, so it is neither counted nor lost.
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.rtx import sandbox
from trtpipe.trt.rtx import engine_program
from trtpipe.trt.rtx.engine_program import EngineProgram

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class QuantizedLayers:
    source_quantized: tuple[str, ...]      # linear ops quantized in the source model's engine
    output_quantized: tuple[str, ...]      # ... and in the engine of trtpipe's output
    source_linear: int
    output_linear: int
    lost: tuple[str, ...]                  # "name (int8xint8 -> halfxhalf)"
    fell_back: tuple[str, ...]             # "name [kind]: ..."

    @property
    def ok(self) -> bool:
        return not self.lost and not self.fell_back

    def line(self) -> str:
        return (f"linear ops quantized in the engine: source {len(self.source_quantized)}/{self.source_linear}, "
                f"output {len(self.output_quantized)}/{self.output_linear}; "
                f"lost: {', '.join(self.lost) or 'none'}; planned FP16 run FP32: {', '.join(self.fell_back) or 'none'}")


def compare(source: EngineProgram, output: EngineProgram, plan: dict | None = None) -> QuantizedLayers:
    """`plan`: precision_plan.json of trtpipe's output (None: the fall-back check is skipped)."""
    by_name = {op.name: op for op in output.linear}
    lost = []
    for op in source.linear:
        if not op.quantized:
            continue
        now = by_name.get(op.name)
        if now is None:
            lost.append(f"{op.name} ({op.types} -> no linear op)")
        elif not now.quantized:
            lost.append(f"{op.name} ({op.types} -> {now.types})")
    return QuantizedLayers(
        source_quantized=tuple(op.name for op in source.linear if op.quantized),
        output_quantized=tuple(op.name for op in output.linear if op.quantized),
        source_linear=len(source.linear), output_linear=len(output.linear),
        lost=tuple(lost), fell_back=tuple(fell_back(output, plan)) if plan else ())


def fell_back(program: EngineProgram, plan: dict) -> list[str]:
    """Ops the plan made FP16 that the engine runs in FP32 (see the module doc)."""
    precision = {node["name"]: node["precision"] for node in plan["nodes"]}
    found = []
    for op in program.linear:
        if precision.get(op.name) == "fp16" and "float" in op.operand_types:
            found.append(f"{op.name} [{op.kind}]: operands {op.types}")
    for op in program.kernels:
        planned = [precision.get(layer) for layer in op.layers]
        if planned and all(p == "fp16" for p in planned) and "float" in op.output_types:
            found.append(f"{op.name} [{', '.join(op.layers)}]: writes {','.join(op.output_types)}")
    return found


def build_program(model: Path, out: Path, oracle: dict, target: str = "sm89", timeout: float = 600.0,
                  shapes: list[str] | None = None) -> EngineProgram:
    """`model` built ahead of time by the real builder (oracle: bench.rtx.check.prepare), its engine's
    program read; the EP's log is written next to `out` (`<out>.log`). RuntimeError when it does not build."""
    child = [sys.executable, "-m", "bench.rtx.compile_one", str(model), str(out), "--target", target,
             "--standins", str(oracle["standins"]), "--wheel-home", str(oracle["wheel_home"])]
    if shapes:
        child += ["--shapes", *shapes]
    done = subprocess.run(sandbox.wrap(child, oracle["fake_drm"]), capture_output=True, text=True,
                          env=oracle["env"], timeout=timeout, cwd=REPO)
    out.with_suffix(".log").write_text(done.stderr)
    status = next((json.loads(line) for line in reversed(done.stdout.splitlines()) if line.startswith("{")), {})
    if not status.get("ok"):
        raise RuntimeError(f"{model.name} did not build: {status.get('error') or done.stderr.strip()[-300:]}")
    return engine_program.read(engine_program.engine_bytes(out))


def plan_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "precision" / "precision_plan.json").read_text())
