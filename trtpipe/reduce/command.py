"""`trtpipe-reduce RUN_DIR [-o DIR] [--max-trials N]` (also `trtpipe reduce RUN_DIR ...`).

Writes DIR (default `reduced` in the working directory): `model.onnx`, the smallest window of the
run's candidate that breaks the same bound on its own (shrink.py); `inputs.npz`, its inputs (the
reference's values at the cut, in the candidate's types); `reference.npz`, the FP32 reference's
value of its output; `reduce.json`, what was reduced and why (run, output, bound, metrics, nodes).

Decisions:
- Nothing in the run directory or the cache is written: the run is evidence, a bug report
  attaches DIR.
- DIR is written whole or not at all: the files go to a temporary folder beside it, renamed into
  place at the end; an existing non-empty DIR is refused (exit 2) rather than mixed with.
- Bad input (no run directory, a run that did not fail validation) is one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from trtpipe.errors import EXIT_OK, EXIT_USER_ERROR, UserError

PROG = "trtpipe-reduce"


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        summary = reduce_run(Path(args.run_dir), Path(args.output), args.max_trials)
    except UserError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    print(summary, flush=True)
    sys.exit(EXIT_OK)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="The smallest subgraph of a failing run's candidate "
                                                            "that still breaks the same bound, as an ONNX model "
                                                            "with its inputs (like polygraphy debug reduce).")
    parser.add_argument("run_dir", help="the run directory of a run whose validate stage failed")
    parser.add_argument("-o", "--output", default="reduced", help="the folder to write (default: ./reduced)")
    parser.add_argument("--max-trials", type=int, default=400, help="windows tried at most (default 400)")
    return parser


def reduce_run(run_dir: Path, out_dir: Path, max_trials: int = 400) -> str:
    from trtpipe.reduce.failing_run import read_failing_run
    from trtpipe.reduce.shrink import Reducer

    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UserError(f"{out_dir} already exists and is not an empty folder",
                        "pass another folder with --output, or remove that one")
    run = read_failing_run(run_dir)
    reduced = Reducer(run, max_trials).reduce()
    record = {"run_dir": str(run_dir), "output_of_run": run.output, "bound": run.bound,
              "bounds_broken_by_run": run.output_bounds, "origins": run.origins[:5],
              "reduced_output": reduced.output, "bounds_broken": reduced.broken, "metrics": reduced.metrics,
              "nodes": reduced.nodes, "inputs": {k: {"dtype": str(v.dtype), "shape": list(v.shape)}
                                                 for k, v in reduced.inputs.items()},
              "trials": reduced.trials, "candidate_nodes": len(run.candidate.graph.node)}
    _write(out_dir, reduced, record)
    ops = ", ".join(n["op_type"] for n in reduced.nodes)
    return (f"{PROG}: {len(reduced.nodes)} of {len(run.candidate.graph.node)} nodes ({ops}) still break "
            f"{run.bound} on their own ({reduced.output}; the run: {run.output}), {reduced.trials} trials -> "
            f"{out_dir}/model.onnx, inputs.npz, reference.npz, reduce.json")


def _write(out_dir: Path, reduced, record: dict) -> None:
    import numpy as np
    import onnx

    out_dir = out_dir.absolute()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        onnx.save(reduced.model, str(scratch / "model.onnx"))
        np.savez(scratch / "inputs.npz", **reduced.inputs)
        np.savez(scratch / "reference.npz", **reduced.reference)
        (scratch / "reduce.json").write_text(json.dumps(record, indent=1) + "\n")
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked): replaced by the finished folder
        os.rename(scratch, out_dir)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
