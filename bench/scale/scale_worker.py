"""The measured processes of `scale.py`, one fresh interpreter each.

    python -m bench.scale.scale_worker baseline SRC OUT_DIR
    python -m bench.scale.scale_worker stages SRC OUT_DIR [--profile]

`baseline`: `onnx.load(SRC)` (external data loaded) + `onnx.save(..., save_as_external_data=True,
all_tensors_to_one_file=True)`. `stages`: trtpipe's `SanitizeModel`, `UpgradeOpset` and
`PlanPrecision` called directly on files, with the configs the CLI composes for
`model.path=SRC +data.inputs.x={low:-1,high:1,dtype:float32}` (same `trtpipe.api.compose`,
same `OmegaConf.to_container(cfg[stage], resolve=True)` and resolved `data` block as the
runner), without the cache and its hashing.

Both print one JSON line on stdout (also when a step fails: it is the last step, with
its `error`, and the exit code is 1): per step its wall seconds, the RSS when it
started and the peak RSS during it (VmHWM, reset at the start of the step by
writing 5 to /proc/self/clear_refs). The whole process's peak is measured by the
parent (`os.wait4`), not here.

`--profile`: a thread samples VmRSS every 2 ms and, each time RSS reaches a new
high (in steps of a tenth of the model, at least 64 MiB), records the main thread's Python stack; the JSON then says,
per step, at which call the peak was reached and how RSS climbed. RSS sees the
allocations tracemalloc misses (protobuf's C++ arenas, ONNX Runtime, onnx's C++
shape inference), which is where the weights of a large model live. Blind spot:
the sampler needs the GIL, so a climb inside one long C call that holds it (upb's
`ByteSize`/`SerializeToString`) is seen only if RSS is still high when the call
returns; the per-step VmHWM is exact regardless. The sampler keeps no frame
object (only file/line strings), so it does not keep a stage's models alive.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from pathlib import Path

MIB = 1 << 20
# Needs the leading `+` (a new entry of `data.inputs`). At HEAD cfda5cc trtpipe refused this
# override ("dict is not a subclass of InputSpec"); at 0da3c12 it is accepted.
INPUT_OVERRIDE = "+data.inputs.x={low:-1,high:1,dtype:float32}"
STAGES = ("sanitize", "upgrade_opset", "precision")


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


class PeakSampler(threading.Thread):
    """Records the main thread's stack whenever RSS climbs to a new high."""

    def __init__(self, interval: float = 0.002, step_bytes: int = 64 * MIB) -> None:
        super().__init__(daemon=True)
        self.interval, self.step = interval, step_bytes
        self.main = threading.main_thread().ident
        self.events: list[dict] = []
        self.label, self.high = "", 0
        self._stop = threading.Event()

    def start_step(self, label: str) -> None:
        self.label, self.high = label, 0

    def run(self) -> None:
        with open("/proc/self/statm") as statm:
            page = 4096
            while not self._stop.wait(self.interval):
                statm.seek(0)
                rss = int(statm.read().split()[1]) * page
                if rss >= self.high + self.step:
                    self.high = rss
                    frame = sys._current_frames().get(self.main)
                    stack = traceback.extract_stack(frame) if frame else []
                    del frame  # a kept frame would keep the stage's locals (whole models) alive
                    where = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in stack
                             if "site-packages" not in f.filename or "trtpipe" in f.filename][-4:]
                    lib = next((f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno} {f.name}"
                                for f in reversed(stack) if "site-packages" in f.filename), "")
                    self.events.append({"step": self.label, "rss_mib": round(rss / MIB), "where": where,
                                        "innermost_library_frame": lib})

    def stop(self) -> None:
        self._stop.set()


def _measured(steps: list[tuple[str, callable]], sampler: PeakSampler | None) -> list[dict]:
    results = []
    for label, step in steps:
        if sampler:
            sampler.start_step(label)
        _reset_peak()
        start_rss = _status_kib("VmRSS")
        started = time.perf_counter()
        try:
            summary, error = step(), None
        except Exception as exception:  # reported, not raised: the steps before it keep their figures
            summary, error = "", f"{type(exception).__name__}: {' '.join(str(exception).split())[:300]}"
            traceback.print_exc()
        seconds = time.perf_counter() - started
        results.append({"step": label, "seconds": round(seconds, 3), "start_rss_mib": round(start_rss / 1024),
                        "peak_rss_mib": round(_status_kib("VmHWM") / 1024), "summary": summary})
        if error:
            results[-1]["error"] = error
            break
    return results


def baseline(src: Path, out_dir: Path) -> list[tuple[str, callable]]:
    import onnx

    out = out_dir / "model.onnx"
    held = {}

    def load():
        held["model"] = onnx.load(str(src))  # load_external_data=True by default
        return f"{len(held['model'].graph.node)} nodes"

    def save():
        onnx.save(held.pop("model"), str(out), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=out.name + ".data")
        return f"{sum(p.stat().st_size for p in out_dir.iterdir()) / 1e9:.3f} GB written"

    return [("onnx.load", load), ("onnx.save", save)]


def stages(src: Path, out_dir: Path) -> list[tuple[str, callable]]:
    from omegaconf import OmegaConf

    from trtpipe.api import compose
    from trtpipe.data import resolved_data
    from trtpipe.stages import stage_class

    overrides = [f"model.path={src}", f"stages=[{','.join(STAGES)}]", INPUT_OVERRIDE]
    cfg = compose(overrides)
    data = resolved_data(cfg.data, None, Path.cwd())
    current = {"model": src}

    def step(name: str):
        def run():
            stage = stage_class(name)
            config = OmegaConf.to_container(cfg[name], resolve=True)
            if stage.uses_data:
                config["data"] = data
            stage_dir = out_dir / name
            stage_dir.mkdir(parents=True)
            outcome = stage().run({kind: current["model"] for kind in stage.consumes}, config, stage_dir)
            current["model"] = stage_dir / outcome.outputs["model"]
            return outcome.summary
        return run

    return [(name, step(name)) for name in STAGES]


def main(argv: list[str]) -> int:
    mode, src, out_dir = argv[0], Path(argv[1]), Path(argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    # New highs in steps of a tenth of the model (at least 64 MiB): a readable number of lines.
    model_bytes = sum(path.stat().st_size for path in src.parent.glob(src.name + "*"))
    sampler = PeakSampler(step_bytes=max(64 * MIB, model_bytes // 10)) if "--profile" in argv else None
    steps = {"baseline": baseline, "stages": stages}[mode](src, out_dir)
    if sampler:
        sampler.start()
    results = _measured(steps, sampler)
    if sampler:
        sampler.stop()
    print(json.dumps({"mode": mode, "steps": results, "profile": sampler.events if sampler else None}))
    return 1 if "error" in results[-1] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
