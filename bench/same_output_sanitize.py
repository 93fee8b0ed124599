"""Does sanitize write the same bytes with and without the fast folding pass (trtpipe/graph/fast_fold.py)?

    python -m bench.same_output_sanitize [--fuzz 300] [--layers 4 24] [--no-wild]

Runs `sanitize_model` twice on each model, once with `fast_fold.ENABLED =
False` (Polygraphy's pass only, main's behaviour) and once with it on, and
compares the written files byte for byte (model and any external data), the
reports, and the errors raised. Models: the built-in ones, the benchmark
encoders (bench/encoders.py), the wild corpus already downloaded under
~/.cache/trtpipe/wild/models (read only: results go to a temporary
directory), and mutated graphs drawn from bench/fuzz_graphs.py's strategy
(deterministic draws), also mutating richer bases than the fuzzer's own
(`--fuzz-bases`: built-in models with many Constant nodes, and a graph of
Shape -> Gather/Slice folds) so that mutations hit the folding rules. Prints one line per model (SAME/DIFF, which path the
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
PATHS: list[str] = []  # the path each fast run took ("fast", or "fallback: <reason>")


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
    PATHS.append(path)
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
    parser.add_argument("--fuzz-bases", nargs="*", default=["fuzz", "transformer", "gpt2", "shapes"],
                        help="graphs the fuzz mutations start from: fuzz (the fuzzer's own), shapes, a built-in name")
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
            external = work / f"encoder-{layers}-external" / "model.onnx"  # weights in a data file: kept on disk
            external.parent.mkdir()
            onnx.save(build_encoder(layers), str(external), save_as_external_data=True, location="weights.bin",
                      size_threshold=1024)
            sources.append((f"encoder-{layers}-external-data", external))
        if not args.no_wild:
            sources.extend((f"wild {path.parent.name}", path) for path in sorted(WILD_DIR.glob("*/*.onnx")))
        for index, (tag, path) in enumerate(sources):
            differences += not compare(path, work / "out", f"{index:02d}-{tag.replace(' ', '_')}")
        for base in args.fuzz_bases:
            differences += _fuzz(args.fuzz, work, base)
    print(f"{differences} difference(s)")
    return 1 if differences else 0


def _fuzz(count: int, work: Path, base: str) -> int:
    if count <= 0:
        return 0
    from hypothesis import HealthCheck, given, settings

    from bench import fuzz_graphs

    original_base = fuzz_graphs.base_model
    if base == "shapes":
        fuzz_graphs.base_model = _shapes_base
    elif base != "fuzz":
        from trtpipe.models import builtin_model

        fuzz_graphs.base_model = lambda: builtin_model(base)
    counts = {"runs": 0, "differences": 0}

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(fuzz_graphs.mutated_models())
    def one(model_bytes: bytes) -> None:
        counts["runs"] += 1
        path = work / "fuzz.onnx"
        path.write_bytes(model_bytes)
        if not compare(path, work / "fuzz-out", f"fuzz-{base}-{counts['runs']:04d}", quiet=True):
            counts["differences"] += 1
            (work.parent / f"same_output_fuzz_{base}_{counts['runs']}.onnx").write_bytes(model_bytes)

    first = len(PATHS)
    try:
        one()
    finally:
        fuzz_graphs.base_model = original_base
    fast = sum(path == "fast" for path in PATHS[first:])
    print(f"fuzz from {base}: {counts['runs']} graphs ({fast} on the fast path), {counts['differences']} difference(s)",
          flush=True)
    return counts["differences"]


def _shapes_base():
    """x[2, n, 8] -> Reshape(x, [dim0, -1, last]) + 2 * w, times the dynamic dim n: Constant nodes, static and
    dynamic Shape -> Gather/Slice, a foldable chain, for the mutations to break."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def ints(name, values):
        return numpy_helper.from_array(np.array(values, dtype=np.int64), name)

    def constant(name, array):
        return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(array, name + "_v"))

    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             constant("i0", np.array(0, np.int64)),
             helper.make_node("Gather", ["shape", "i0"], ["dim0"], name="gather0", axis=0),
             helper.make_node("Gather", ["shape", "i1"], ["dim1"], name="gather1", axis=0),
             helper.make_node("Slice", ["shape", "starts", "ends"], ["last"], name="slice"),
             helper.make_node("Unsqueeze", ["dim0", "axes0"], ["dim0_1d"], name="unsqueeze"),
             helper.make_node("Concat", ["dim0_1d", "minus_one", "last"], ["target"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["reshaped"], name="reshape"),
             constant("w", np.linspace(-1, 1, 8, dtype=np.float32)),
             constant("two", np.array(2.0, np.float32)),
             helper.make_node("Mul", ["w", "two"], ["w2"], name="scale_w"),
             helper.make_node("Add", ["reshaped", "w2"], ["biased"], name="bias"),
             helper.make_node("Cast", ["dim1"], ["dim1_f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["biased", "dim1_f"], ["y"], name="times_n")]
    inits = [ints("i1", 1), ints("starts", [2]), ints("ends", [3]), ints("axes0", [0]), ints("minus_one", [-1])]
    graph = helper.make_graph(nodes, "shapes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "n", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


if __name__ == "__main__":
    sys.exit(main())
