"""Where a fully cached run's time goes (issue 33 item 6): imports by package, and the rest.

One more run of the cached command under `python -X importtime` (untimed by the comparison, so its
overhead touches no ratio): each import line's own time ("self", not cumulative) is summed per
group of top-level modules below, so the groups add up to the run's import time (wall time, as
-X importtime measures it); the run's wall time minus that is the work itself (interpreter start,
loading the remembered composition, Hydra's job set-up and .hydra/ files, the stage keys and
cache hits, the manifest). The run's CPU time (os.wait4) is recorded beside it.
Recorded by `python -m bench.front_door --record` as `breakdown.*` (seconds); docs/cache.md shows it.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

# group -> top-level modules; anything else (the standard library, small dependencies) is "other".
GROUPS = {
    "trtpipe": ("trtpipe",),
    "hydra": ("hydra", "hydra_plugins"),
    "omegaconf": ("omegaconf",),
    "parsers": ("yaml", "antlr4"),  # OmegaConf's and Hydra's grammars and YAML
    "polygraphy": ("polygraphy",),  # the build key's CUDA runtime version (trt/environment.py)
    "numpy_onnx": ("numpy", "onnx", "onnxruntime", "google"),  # none on a cached run of the built-in model
}


def import_seconds(stderr: str) -> dict[str, float]:
    """`-X importtime` lines -> seconds of own import time per group (and "other")."""
    totals = {name: 0.0 for name in [*GROUPS, "other"]}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, own, _, name = (part.strip() for part in line.replace("import time:", "|", 1).split("|"))
        top = name.split(".")[0]
        group = next((group for group, tops in GROUPS.items() if top in tops), "other")
        totals[group] += int(own) / 1e6
    return totals


def breakdown(command: list[str], cwd: Path, env: dict) -> dict[str, float]:
    """`breakdown.*` figures of one run of `command` (a `python -m trtpipe ...` list)."""
    started = time.perf_counter()
    child = subprocess.Popen([command[0], "-X", "importtime", *command[1:]], cwd=cwd, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed under -X importtime: {stderr[-500:]}")
    imports = import_seconds(stderr)
    cpu = usage.ru_utime + usage.ru_stime
    figures = {f"breakdown.imports.{group}_s": round(seconds, 3) for group, seconds in imports.items()}
    figures["breakdown.imports_s"] = round(sum(imports.values()), 3)
    figures["breakdown.wall_s"] = round(wall, 3)
    figures["breakdown.cpu_s"] = round(cpu, 3)
    figures["breakdown.rest_s"] = round(max(wall - sum(imports.values()), 0.0), 3)
    return figures
