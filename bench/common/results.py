"""Each benchmark family's machine-readable result file: `bench/<family>/results.json`.

The docs cite figures from these files (docs/figures.md says how; bench/common/figures.py
and tests/test_doc_figures.py check every citation). A family's command writes its file with
`write_results` (`--record`), so the file is regenerated, never edited by hand.

Layout:
    {"family": "front_door",
     "command": "python -m bench.front_door --record",
     "environment": {"date": ..., "commit": ..., "load_average": [1, 5, 15 min], "cpus": 2, ...},
     "figures": {"cached.wall_s": 1.23, "transcript": "...", ...},
     "notes": "..."}

`figures` is flat: one dotted key per figure, its value a number (in the unit the docs show:
seconds, MB, percent, a ratio), a list of numbers (a range or an `a / b / c` cell), or a
string (a console transcript). Why flat: a citation names one key, and a test reports a
missing key by that one name. The machine's load is recorded with every file: absolute
timings depend on it (the development machine is shared), ratios measured in one run much
less.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent


def results_path(family: str) -> Path:
    return BENCH / family / "results.json"


def environment() -> dict:
    """What the figures depend on: when, which code, how loaded the machine was."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except OSError:
        commit = None
    versions = {}
    for name in ("onnx", "onnxruntime"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit, "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
            "python": platform.python_version(), **versions}


def write_results(family: str, figures: dict, *, command: str, notes: str = "", path: Path | None = None,
                  converted_from: str | None = None, owns=None) -> Path:
    """Write `bench/<family>/results.json` (sorted keys, so a rerun's diff shows what changed).

    `converted_from`: the figures were read from an earlier run's saved output (named here), not
    measured now; the environment then says so and records no load average (it would be today's).
    `owns(key)`: when given, this writer replaces only the keys it owns and keeps the file's others
    (two commands of one family share its file: bench.autocast and bench.autocast.whole_path; the
    environment, command and notes are the latest writer's, so a writer that shares the file
    records its own date and load among its figures)."""
    for key, value in figures.items():
        if not (isinstance(value, (int, float, str)) or
                (isinstance(value, list) and all(isinstance(v, (int, float)) for v in value))):
            raise TypeError(f"figure {key!r}: {value!r} is not a number, a list of numbers or a string")
    target = path or results_path(family)
    if owns is not None and target.exists():
        earlier = json.loads(target.read_text())
        figures = {**{k: v for k, v in earlier["figures"].items() if not owns(k)}, **figures}
    env = environment()
    if converted_from:
        env = {"converted_from": converted_from, "converted": env["date"], "commit": env["commit"]}
    record = {"family": family, "command": command, "environment": env,
              "figures": dict(sorted(figures.items())), "notes": notes}
    target.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(f"results written to {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
    return target


def load_results(family: str) -> dict:
    return json.loads(results_path(family).read_text())
