"""validate's candidate for a TensorRT-RTX build: the EPContext model, run by ONNX Runtime on an RTX GPU.

Written from ONNX Runtime's plugin-EP documentation (register the EP library, pick the EP's
`OrtEpDevice`, `SessionOptions.add_provider_for_devices`, then an ordinary `InferenceSession`
on the EPContext model, which hands the embedded engine to the EP). It has NOT been executed
by trtpipe's tests: no machine they run on has an RTX GPU, and the stand-in driver of the
tests (bench/rtx) reports no memory, so no engine can run there. What is tested is that
validate picks the EPContext engine up and, without a device, skips it with the reason.

Decisions:
- In the validating process, not a child: the inputs and outputs are arrays, and no log
  needs capturing; the EP is registered once per process (trtpipe.trt.rtx.loader).
- `session.disable_cpu_ep_fallback=1`: if the EP cannot take the EPContext node, the run
  fails instead of ONNX Runtime quietly running something else on the CPU.
- Where the EP lists a device but ONNX Runtime or the EP fails to create the session or run it,
  validate fails (exit 1) with their message, not a traceback: the engine did not run.
  In the tests' sandbox this is where it ends: the EP creates its provider, calls the stand-in
  driver (`cuStreamGetCtx`), and the stand-in answers "no device".
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from trtpipe.errors import StageFailed

EPCONTEXT_SUFFIX = ".onnx"  # the TensorRT backend's engine is `model.engine`, an EPContext model is ONNX


def is_epcontext(engine_path: Path) -> bool:
    return Path(engine_path).suffix == EPCONTEXT_SUFFIX


def run_epcontext(engine_path: Path, feeds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Run the EPContext model once per feed dict; EpUnavailable when no device can run it."""
    from trtpipe.trt.rtx.loader import first_device, load

    ort = load()
    device = first_device(ort)
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    options.add_provider_for_devices([device], {})
    try:
        session = ort.InferenceSession(str(engine_path), sess_options=options)
        names = [output.name for output in session.get_outputs()]
        return [dict(zip(names, session.run(names, dict(feeds_i)))) for feeds_i in feeds]
    except Exception as error:  # ORT's or the EP's refusal, e.g. a driver failure: a failed candidate run
        raise StageFailed(f"validate: the TensorRT-RTX EP listed a device but could not run the EPContext "
                          f"engine {Path(engine_path).name}: {' '.join(str(error).split())[:600]}") from error
