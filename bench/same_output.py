"""Does sanitize write the same bytes with and without the fast folding pass (trtpipe/graph/fast_fold.py)?

    python -m bench.same_output [--fuzz 300] [--layers 4 24] [--no-wild]

Runs `sanitize_model` twice on each model, once with `fast_fold.ENABLED =
False` (Polygraphy's pass only, main's behaviour) and once with it on, and
compares the written files byte for byte (model and any external data), the
reports, and the errors raised. Models: the built-in ones, the benchmark
encoders (bench/encoders.py), the wild corpus already downloaded under
~/.cache/trtpipe/wild/models (read only: results go to a temporary
directory), and mutated graphs drawn from bench/fuzz_graphs.py's strategy
(deterministic draws). Prints one line per model (SAME/DIFF, which path the
fast run took, both times) and exits 1 on any difference. Run by hand, not in
the test suite (a few minutes).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

WILD_DIR = Path.home() / ".cache" / "trtpipe" / "wild" / "models"


class _FastPathUse(logging.Handler):
    """Counts the fallbacks fast_fold logs, to say which path a run took."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []

    def emit(self, record):
        if "fast constant folding not used" in record.getMessage():
            self.reasons.append(record.getMessage())


def sanitized(src: Path, out_dir: Path, fast: bool) -> tuple[object, float]:
    """(written bytes by file name, report) or the error text; and seconds."""
    from trtpipe.graph import fast_fold
    from trtpipe.graph.sanitize import sanitize_model

    fast_fold.ENABLED = fast
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        report = sanitize_model(src, out_dir / "model.onnx")
        result = ({path.name: path.read_bytes() for path in sorted(out_dir.iterdir())}, report)
    except Exception as error:  # noqa: BLE001 - both paths must fail alike
        result = f"{type(error).__name__}: {error}"
    finally:
        fast_fold.ENABLED = True
    return result, time.perf_counter() - start


def compare(src: Path, work: Path, tag: str, quiet: bool = False) -> bool:
    watcher = _FastPathUse()
    logger = logging.getLogger("trtpipe.graph.fast_fold")
    logger.addHandler(watcher)
    logger.setLevel(logging.DEBUG)
    try:
        reference, ref_seconds = sanitized(src, work / f"{tag}-reference", fast=False)
        fast, fast_seconds = sanitized(src, work / f"{tag}-fast", fast=True)
    finally:
        logger.removeHandler(watcher)
    same = reference == fast
    path = "fallback: " + watcher.reasons[0].split("(", 1)[1].split(")")[0] if watcher.reasons else "fast"
    if not same or not quiet:
        print(f"{'SAME' if same else 'DIFF'} {tag}: {path}; reference {ref_seconds:.2f}s, fast {fast_seconds:.2f}s",
              flush=True)
    if not same:
        print("   reference:", _summary(reference), "\n   fast:     ", _summary(fast), flush=True)
    return same


def _summary(result) -> str:
    if isinstance(result, str):
        return result[:300]
    files, report = result
    return f"files {[(n, len(b)) for n, b in files.items()]}, nodes {report.get('nodes_after')}, " \
           f"undone {report.get('undone')}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fuzz", type=int, default=300, help="mutated graphs to draw")
    parser.add_argument("--layers", type=int, nargs="*", default=[4, 24])
    parser.add_argument("--no-wild", action="store_true")
    args = parser.parse_args(argv)
    import onnx

    from bench.encoders import build_encoder
    from trtpipe.models import builtin_model
    from trtpipe.models.catalog import BUILTIN_MODULES

    logging.getLogger("trtpipe").setLevel(logging.ERROR)
    differences = 0
    with tempfile.TemporaryDirectory(prefix="trtpipe-same-output-") as tmp:
        work = Path(tmp)
        sources: list[tuple[str, Path]] = []
        for name in BUILTIN_MODULES:
            path = work / f"builtin-{name}.onnx"
            onnx.save(builtin_model(name), str(path))
            sources.append((f"builtin {name}", path))
        for layers in args.layers:
            path = work / f"encoder-{layers}.onnx"
            onnx.save(build_encoder(layers), str(path))
            sources.append((f"encoder-{layers}", path))
        if not args.no_wild:
            sources.extend((f"wild {path.parent.name}", path) for path in sorted(WILD_DIR.glob("*/*.onnx")))
        for index, (tag, path) in enumerate(sources):
            differences += not compare(path, work / "out", f"{index:02d}-{tag.replace(' ', '_')}")
        differences += _fuzz(args.fuzz, work)
    print(f"{differences} difference(s)")
    return 1 if differences else 0


def _fuzz(count: int, work: Path) -> int:
    if count <= 0:
        return 0
    from hypothesis import HealthCheck, given, settings

    from bench.fuzz_graphs import mutated_models

    counts = {"runs": 0, "differences": 0}

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(mutated_models())
    def one(model_bytes: bytes) -> None:
        counts["runs"] += 1
        path = work / "fuzz.onnx"
        path.write_bytes(model_bytes)
        if not compare(path, work / "fuzz-out", f"fuzz-{counts['runs']:04d}", quiet=True):
            counts["differences"] += 1
            (work.parent / f"same_output_fuzz_{counts['runs']}.onnx").write_bytes(model_bytes)

    one()
    print(f"fuzz: {counts['runs']} graphs, {counts['differences']} difference(s)", flush=True)
    return counts["differences"]


if __name__ == "__main__":
    sys.exit(main())
