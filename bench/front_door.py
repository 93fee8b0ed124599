"""Front-door benchmark (issue 14, item 17): what `trtpipe` costs before any stage works.

    cd /work/main && python -m bench.front_door                 # ~15 s
    python -m bench.front_door --repeat 9                       # more runs per command
    python -m bench.front_door --code /path/to/other/checkout   # the same on another version

Measures, side by side and interleaved (round robin, so a busy machine slows all alike),
each command in a fresh subprocess from spawn to exit (interpreter start and imports
included: a user pays them):

  floor       python -c "import onnx"      the least any ONNX tool pays to start
  --version   trtpipe --version
  --help      trtpipe --help
  cached      trtpipe (the default pipeline on the built-in model, every stage cached:
              the cache is filled by one untimed run first)

Prints the median wall time of each, its ratio to the floor, and the targets of issue 14
(cached run < 0.6 s, --help < 0.5 s on the development machine); exit 1 if one fails.
Not a test: timings depend on the machine; tests/test_front_door.py checks the structure
(no Hydra for --help, one composition per run, matplotlib only when a plot is drawn).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"cached": 0.6, "--help": 0.5}


def commands(work: Path) -> dict[str, list[str]]:
    trtpipe = [sys.executable, "-m", "trtpipe"]
    return {
        "floor": [sys.executable, "-c", "import onnx"],
        "--version": [*trtpipe, "--version"],
        "--help": [*trtpipe, "--help"],
        "cached": [*trtpipe, "--quiet"],  # run directories under outputs/ of the scratch folder
    }


def timed(command: list[str], cwd: Path, env: dict) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command (median reported)")
    parser.add_argument("--code", type=Path, default=ROOT, help="the trtpipe checkout to measure")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="trtpipe-front-door-") as scratch:
        work = Path(scratch)
        env = {**os.environ, "PYTHONPATH": str(args.code.resolve()), "TRTPIPE_CACHE": str(work / "cache")}
        env.pop("TRTPIPE_DEBUG", None)
        todo = commands(work)
        timed(todo["cached"], work, env)  # fill the cache (untimed)
        times: dict[str, list[float]] = {name: [] for name in todo}
        for _ in range(args.repeat):
            for name, command in todo.items():
                times[name].append(timed(command, work, env))
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor = medians["floor"]
    print(f"front door of {args.code} (median of {args.repeat} runs each, interleaved)")
    print(f"  {'command':10} {'seconds':>8} {'x floor':>8}  target")
    failed = False
    for name, seconds in medians.items():
        target = TARGETS.get(name)
        verdict = "" if target is None else f"< {target} s {'ok' if seconds < target else 'MISSED'}"
        failed |= target is not None and seconds >= target
        print(f"  {name:10} {seconds:8.3f} {seconds / floor:8.2f}  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
