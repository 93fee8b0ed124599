"""`python -m bench.quantized [--record]`: explicitly quantized models through trtpipe and AutoCast,
built by the TensorRT-RTX oracle (issue 31, item 5). bench/quantized/__init__.py says what it measures."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_WORK = Path(os.environ.get("TRTPIPE_BENCH_QUANTIZED", Path.home() / ".cache" / "trtpipe" / "bench-quantized"))


def main(argv=None) -> int:
    from bench.quantized import run
    from bench.quantized.quantize import QUANTIZERS
    from bench.quantized.sources import BY_NAME

    parser = argparse.ArgumentParser(prog="python -m bench.quantized", description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write bench/quantized/results.json")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK,
                        help=f"float and quantized models are made once here (default {DEFAULT_WORK})")
    parser.add_argument("--bench-python", default=os.environ.get("TRTPIPE_BENCH_PYTHON", sys.executable),
                        help="the Python with the bench extra (torch, transformers, ModelOpt); "
                             "default $TRTPIPE_BENCH_PYTHON, else this one")
    parser.add_argument("--sources", nargs="+", choices=list(BY_NAME), default=list(BY_NAME))
    parser.add_argument("--quantizers", nargs="+", choices=QUANTIZERS, default=list(QUANTIZERS))
    parser.add_argument("--no-autocast", action="store_true", help="leave AutoCast out")
    args = parser.parse_args(argv)
    problem = run.unavailable(args.bench_python)
    if problem:
        print(f"quantized: {problem}", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-quantized-") as tmp:
        try:
            rows = run.run_all([BY_NAME[s] for s in args.sources], args.quantizers, args.work.resolve(), Path(tmp),
                               args.bench_python, autocast=not args.no_autocast)
        except RuntimeError as exc:
            print(f"quantized: cannot run: {exc}", file=sys.stderr)
            return 2
    if args.record:
        from bench.quantized import record
        print(f"recorded: {record.write(rows, time.perf_counter() - started, args.bench_python)}")
    return 0 if all(r.counts for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
