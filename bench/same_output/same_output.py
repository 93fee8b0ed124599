"""Differential check: do sanitize and upgrade_opset write the same bytes as another checkout's (main's)?

    python bench/same_output/same_output.py prepare DIR [--stage sanitize|upgrade_opset|both]   # inputs, from this checkout
    PYTHONPATH=/work/main python bench/same_output/same_output.py run DIR main                  # each stage's outputs
    PYTHONPATH=$PWD       python bench/same_output/same_output.py run DIR new
    PYTHONPATH=$PWD       python bench/same_output/same_output.py run DIR slow --reference-path  # fast paths off
    python bench/same_output/same_output.py compare DIR main new    # (and: compare DIR slow new)

Both stages have a fast path that writes, without onnx-graphsurgeon's round trip,
what that round trip writes (sanitize's first folding pass: fast_fold.py;
upgrade_opset's LayerNorm fusion: layernorm_proto.py; graphsurgeon's export
rules for both: gs_export.py). `run --reference-path` turns both off
(`fast_fold.ENABLED = False`; the fusion's ModelProto path made to refuse), so
`compare DIR slow new` checks one checkout's fast paths against graphsurgeon's
round trip, and `compare DIR main new` a change against main.

Cases (`prepare`, deterministic), per stage:
- sanitize (inputs: the raw models): the built-in models, bench encoders
  (`--layers`, default 4 and 24; each also with its weights in an external data
  file), the wild corpus already downloaded in ~/.cache/trtpipe/wild/models (read
  only: copied), and bench/fuzz/fuzz_graphs.py's mutated graphs (`--fuzz` draws from
  each `--fuzz-bases`: the fuzzer's own base, transformer, gpt2, and a graph of
  Constant nodes and Shape -> Gather/Slice folds, so that mutations hit the
  folding rules), and the LayerNorm forms and their mutations listed below;
- upgrade_opset (inputs: sanitized as the pipeline does; a model sanitize refuses
  is used as it is): the built-in models (t5/gpt2/transformer also with their
  nodes shuffled), encoders of 1, 2 and 4 layers, the wild corpus, every LayerNorm
  form of tests/graph (affine or not, opsets 17/18, dynamic batch, wrong 1/N,
  epsilon as input, LayerNorm2d, constants as nodes, ...), those forms mutated
  (`--mutated`: edges rewired, attributes changed, nodes dropped, intermediates
  made outputs, doc strings) and fuzz_graphs' mutated graphs (`--fuzz-upgrade`).

`run` runs `sanitize_model` / `upgrade_model` (target 17, fusion on) of whichever
trtpipe is on PYTHONPATH (run it as a file, not with -m, so that this checkout's
trtpipe does not come first) and writes each case's files, its report or error
and its time, and which path it took (not compared, except that a fast path that
crashed, logged "fast constant folding failed", counts as a difference); `compare` says which cases
differ, file by file, counts the fast-path cases and sums the times. Run by
hand, not in the test suite (several minutes).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

STAGES = ("sanitize", "upgrade_opset")
# What each fast path logs when it is not used (the path a case took; never compared).
FALLBACK_LOGS = {"sanitize": ("trtpipe.graph.fold.fast_fold", "fast constant folding not used"),
                 "upgrade_opset": ("trtpipe.graph.layernorm.layernorm_fusion", "LayerNorm fusion through onnx-graphsurgeon")}
# What a fast path logs when it crashed (then the round trip ran): a failure of the check, whatever the bytes.
FAILURE_LOGS = {"sanitize": "fast constant folding failed"}
FAILED = "fast path failed: "


# -- prepare -----------------------------------------------------------------------------------

def prepare(out: Path, args) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    for stage in _stages(args.stage):
        inputs = out / "inputs" / stage
        inputs.mkdir(parents=True, exist_ok=True)
        cases = _sanitize_cases(args) if stage == "sanitize" else _upgrade_cases(args)
        for name, model in cases:
            folder = inputs / name
            folder.mkdir(exist_ok=True)
            if stage == "sanitize":
                _write_raw(model, folder)
            else:
                _write_sanitized(model, folder)
        print(f"{stage}: {len(list(inputs.iterdir()))} cases", flush=True)


def _write_raw(model, folder: Path) -> None:
    if isinstance(model, Path):  # a wild model or a model with its external data: the folder as it is
        shutil.copytree(model.parent, folder, dirs_exist_ok=True)
        if model.name != "model.onnx":
            (folder / model.name).rename(folder / "model.onnx")
    else:
        (folder / "model.onnx").write_bytes(model if isinstance(model, bytes) else model.SerializeToString())


def _write_sanitized(model, folder: Path) -> None:
    from trtpipe.graph.sanitize import sanitize_model

    raw = folder / "raw.onnx"
    if isinstance(model, Path):
        raw = model
    else:
        raw.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    try:
        sanitize_model(raw, folder / "model.onnx")
    except Exception as error:  # noqa: BLE001 - unsanitizable: upgrade reads the raw model
        (folder / "model.onnx").write_bytes(raw.read_bytes())
        (folder / "sanitize_error.txt").write_text(f"{type(error).__name__}: {error}")


def _sanitize_cases(args):
    import onnx

    from bench.common.encoders import build_encoder
    from bench.same_output.same_output_cases import drawn_models, shapes_base
    from trtpipe.models import builtin_model
    from trtpipe.models.catalog import BUILTIN_MODULES

    for name in BUILTIN_MODULES:
        yield f"builtin_{name}", builtin_model(name)
    for layers in args.layers:
        yield f"encoder_{layers}", build_encoder(layers)
        external = Path(args.scratch) / f"encoder_{layers}_external" / "model.onnx"  # weights stay on disk
        external.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(build_encoder(layers), str(external), save_as_external_data=True, location="weights.bin",
                  size_threshold=1024)
        yield f"encoder_{layers}_external_data", external
    if not args.no_wild:
        yield from ((f"wild_{path.parent.name}", path) for path in sorted(_wild_dir().glob("*/*.onnx")))
    for base in args.fuzz_bases:
        if base == "shapes":
            build = shapes_base
        elif base == "fuzz":
            build = None
        else:
            build = (lambda name: lambda: builtin_model(name))(base)
        for index, model_bytes in enumerate(drawn_models(args.fuzz, build)):
            yield f"fuzz_{base}_{index:04d}", model_bytes
    yield from _mutated_forms(args.mutated)


def _mutated_forms(count: int):
    """The LayerNorm forms and `count` mutations of them (doc strings, attributes changed or dropped, ...)."""
    import numpy as np

    from bench.same_output.same_output_cases import layernorm_forms, mutated

    forms = layernorm_forms()
    yield from forms
    rng = np.random.default_rng(7)
    for index in range(count):
        name, model = forms[int(rng.integers(len(forms)))]
        yield f"mutated_{index}_{name}", mutated(model, rng)


def _upgrade_cases(args):
    from bench.common.encoders import build_encoder
    from bench.same_output.same_output_cases import drawn_models, shuffled
    from trtpipe.models import BUILTIN_MODELS, builtin_model

    for name in BUILTIN_MODELS:
        yield f"builtin_{name}", builtin_model(name)
    for name, seed in (("t5", 0), ("gpt2", 1), ("transformer", 2)):
        yield f"shuffled_{name}", shuffled(builtin_model(name), seed)
    for layers in (1, 2, 4):
        yield f"encoder_{layers}", build_encoder(layers)
    if not args.no_wild:
        yield from ((f"wild_{path.parent.name}", path) for path in sorted(_wild_dir().glob("*/*.onnx")))
    yield from _mutated_forms(args.mutated)
    for index, model_bytes in enumerate(drawn_models(args.fuzz_upgrade, None)):
        yield f"fuzz_{index}", model_bytes


# -- run ---------------------------------------------------------------------------------------

class _Fallbacks(logging.Handler):
    """Records the fallback a fast path logs (which path a case took), and its crashes (`failures`)."""

    def __init__(self, text: str, failure_text: str | None = None):
        super().__init__(logging.DEBUG)
        self.text, self.failure_text, self.reasons, self.failures = text, failure_text, [], []

    def emit(self, record):
        message = record.getMessage()
        if self.text in message:
            self.reasons.append(message)
        if self.failure_text and self.failure_text in message:
            self.failures.append(message)


def run(out: Path, label: str, args) -> None:
    import trtpipe

    print(f"trtpipe from {Path(trtpipe.__file__).parent}", flush=True)
    logging.getLogger("trtpipe").setLevel(logging.ERROR)
    if args.reference_path:
        _reference_path()
    for stage in _stages(args.stage):
        inputs = out / "inputs" / stage
        if not inputs.is_dir():
            continue
        logger_name, text = FALLBACK_LOGS[stage]
        watcher = _Fallbacks(text, FAILURE_LOGS.get(stage))
        logger = logging.getLogger(logger_name)
        logger.addHandler(watcher)
        logger.setLevel(logging.DEBUG)
        for folder in sorted(p for p in inputs.iterdir() if p.is_dir()):
            target = out / label / stage / folder.name
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            watcher.reasons.clear()
            watcher.failures.clear()
            outcome = _run_stage(stage, folder / "model.onnx", target / "model.onnx")
            (target / "outcome.json").write_text(json.dumps(outcome, indent=1, sort_keys=True, default=str))
            path = "fast" if not watcher.reasons else "fallback: " + watcher.reasons[0]
            if watcher.failures:  # compare counts it as a difference
                path = FAILED + watcher.failures[0].replace("\n", " ")
            (out / label / stage / f"{folder.name}.path").write_text(
                ("reference path" if args.reference_path else path) + "\n")
        logger.removeHandler(watcher)
        print(f"{stage}: ran {label}", flush=True)


def _run_stage(stage: str, source: Path, destination: Path) -> dict:
    started = time.perf_counter()
    try:
        if stage == "sanitize":
            from trtpipe.graph.sanitize import sanitize_model

            outcome = {"report": sanitize_model(source, destination)}
        else:
            from trtpipe.graph.upgrade import upgrade_model

            outcome = {"report": upgrade_model(source, destination)}
    except Exception as error:  # noqa: BLE001 - the error is part of the behaviour compared
        outcome = {"error": f"{type(error).__name__}: {error}", "where": traceback.format_exc().splitlines()[-3:-1]}
    outcome["seconds"] = time.perf_counter() - started
    return outcome


def _reference_path() -> None:
    """Both stages through graphsurgeon's round trip only (bench-only switches)."""
    from trtpipe.graph.fold import fast_fold
    from trtpipe.graph.layernorm import layernorm_fusion

    fast_fold.ENABLED = False
    exception = layernorm_fusion.OutOfScope

    def refuse(model, working):
        raise exception("--reference-path")

    layernorm_fusion._fuse_on_proto = refuse


# -- compare -----------------------------------------------------------------------------------

def compare(out: Path, reference: str, new: str, stage_choice: str) -> int:
    differences = 0
    for stage in _stages(stage_choice):
        one, two = out / reference / stage, out / new / stage
        if not one.is_dir():
            continue
        differing, times = [], [0.0, 0.0]
        folders = sorted(p for p in one.iterdir() if p.is_dir())
        for folder in folders:
            problems = _problems(folder, two / folder.name, times)
            if problems:
                differing.append(folder.name)
                print(f"DIFF {stage} {folder.name}: " + "; ".join(problems))
        fast = [sum((side / f"{folder.name}.path").read_text().strip() == "fast" for folder in folders
                    if (side / f"{folder.name}.path").exists()) for side in (one, two)]
        print(f"{stage}: {len(folders) - len(differing)}/{len(folders)} cases identical; fast path "
              f"{fast[0]} ({reference}) and {fast[1]} ({new}) cases; stage time {times[0]:.2f} s ({reference}) "
              f"-> {times[1]:.2f} s ({new})")
        differences += len(differing)
    return 1 if differences else 0


def _problems(folder: Path, other: Path, times: list[float]) -> list[str]:
    if not other.is_dir():
        return [f"missing in {other.parent}"]
    problems = []
    for side in (folder, other):
        taken = side.parent / f"{folder.name}.path"
        if taken.exists() and taken.read_text().startswith(FAILED):
            problems.append(f"{taken.read_text().strip()} ({side.parent.parent.name})")
    for path in sorted(folder.iterdir()):
        if path.name == "outcome.json":
            one, two = (json.loads(p.read_text()) for p in (path, other / path.name))
            times[0] += one.pop("seconds")
            times[1] += two.pop("seconds")
            one.pop("where", None)
            two.pop("where", None)
            if _without_temporary_dirs(one) != _without_temporary_dirs(two):
                problems.append(f"outcome {json.dumps(one)[:300]} != {json.dumps(two)[:300]}")
        elif not (other / path.name).exists() or path.read_bytes() != (other / path.name).read_bytes():
            problems.append(f"{path.name} differs")
    extra = {p.name for p in other.iterdir()} - {p.name for p in folder.iterdir()}
    if extra:
        problems.append(f"only in {other.parent}: {sorted(extra)}")
    return problems


def _without_temporary_dirs(outcome: dict) -> str:
    """The outcome as text, temporary directory names (random, quoted in some reasons) replaced."""
    return re.sub(re.escape(tempfile.gettempdir()) + r"/[^/\s'\"]+/", "<temporary dir>/", json.dumps(outcome))


def _stages(choice: str) -> tuple[str, ...]:
    return STAGES if choice == "both" else (choice,)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["prepare", "run", "compare"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("labels", nargs="*", help="run: the output label; compare: the two labels")
    parser.add_argument("--stage", choices=[*STAGES, "both"], default="both")
    parser.add_argument("--reference-path", action="store_true", help="run: fast paths off (graphsurgeon's)")
    parser.add_argument("--layers", type=int, nargs="*", default=[4, 24], help="sanitize: encoder sizes")
    parser.add_argument("--fuzz", type=int, default=300, help="sanitize: mutated graphs drawn per base")
    parser.add_argument("--fuzz-bases", nargs="*", default=["fuzz", "transformer", "gpt2", "shapes"],
                        help="sanitize: graphs the mutations start from: fuzz (the fuzzer's own), shapes, a built-in")
    parser.add_argument("--mutated", type=int, default=200, help="mutated LayerNorm forms")
    parser.add_argument("--fuzz-upgrade", type=int, default=120, help="upgrade_opset: fuzz_graphs draws")
    parser.add_argument("--no-wild", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        args.scratch = args.dir / "scratch"
        prepare(args.dir, args)
        return 0
    if args.command == "run":
        run(args.dir, args.labels[0], args)
        return 0
    return compare(args.dir, args.labels[0], args.labels[1], args.stage)


def _wild_dir() -> Path:
    """The wild models fetched by bench/wild/wild_models.py (`$TRTPIPE_WILD_CACHE` honoured, as it does)."""
    from bench.wild.wild_models import cache_dir

    return cache_dir() / "models"


if __name__ == "__main__":
    sys.exit(main())
