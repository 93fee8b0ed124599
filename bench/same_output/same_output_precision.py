"""Differential check of the precision stage: same model bytes and same plan as a reference tree.

    python -m bench.same_output.same_output_precision prepare WORK [--groups builtin encoders fuzz wild]  # stage inputs, once
    PYTHONPATH=<reference tree> python -m bench.same_output.same_output_precision run WORK OUT_A
    PYTHONPATH=<this tree>      python -m bench.same_output.same_output_precision run WORK OUT_B
    python -m bench.same_output.same_output_precision compare OUT_A OUT_B

`prepare` writes, per case, the model the precision stage receives (the recipe's sanitize and
upgrade_opset already applied, as the pipeline does) and the stage's resolved config. `run` runs
the precision stage on each (whatever code PYTHONPATH selects) and records its seconds; `compare`
says, case by case, whether `model.onnx` is byte-identical and `precision_plan.json` equal.

Cases: the built-in models with their recipe and with the shipped defaults (also with
keep_io_types=false), the benchmark encoders (4 and 24 layers), the wild corpus models already
downloaded (~/.cache/trtpipe/wild/models, read-only) with the default config and their recipe,
and a few mutated graphs of the fuzzer (bench/fuzz/fuzz_graphs.py) that reach the precision stage.

Decision: the reference is another tree (e.g. `git archive <commit>` of main), not a switch in the
code, so the check compares against what main really writes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

SEED = 0
ITERATIONS = 2


def _data(inputs: dict) -> dict:
    return {"seed": SEED, "iterations": ITERATIONS, "inputs": inputs, "path": None, "sha256": None}


def _builtin_cases():
    from bench.common.cases import recipe_config
    from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model
    from omegaconf import OmegaConf
    from bench.corpus.corpus_case import precision_defaults

    recipes = {"transformer": "transformer_fp16", "nafnet": "nafnet_fp16", "mixed_precision": "mixed_precision",
               "t5": "transformer_fp16", "gpt2": "transformer_fp16"}
    for name, recipe in recipes.items():
        cfg = recipe_config(recipe)
        stages = {s: OmegaConf.to_container(cfg[s], resolve=True) for s in ("sanitize", "upgrade_opset", "precision")}
        data = _data(BUILTIN_INPUT_SPECS[name])
        yield f"{name}-{recipe}", builtin_model(name), stages, data
        defaults = {**stages, "precision": precision_defaults()}
        yield f"{name}-default", builtin_model(name), defaults, data
        no_io = {**stages, "precision": {**stages["precision"], "keep_io_types": False}}
        yield f"{name}-{recipe}-noio", builtin_model(name), no_io, data


def _encoder_cases():
    from bench.common.cases import encoder_case, recipe_config
    from omegaconf import OmegaConf

    for layers in (4, 24):
        case = encoder_case(layers)
        cfg = recipe_config(case.recipe)
        stages = {s: OmegaConf.to_container(cfg[s], resolve=True) for s in ("sanitize", "upgrade_opset", "precision")}
        yield case.name, case.build(), stages, _data(case.input_specs)


def _wild_cases():
    import onnx
    from bench.common.cases import recipe_config
    from bench.corpus.corpus_case import _shipped_defaults
    from bench.wild.wild_models import MODELS, cache_dir
    from bench.wild.wild_check import data_specs
    from omegaconf import OmegaConf

    for model in MODELS:
        found = sorted((cache_dir() / "models" / model.name).glob("*.onnx"))
        if not found:
            continue
        inputs = data_specs(model.overrides)
        shipped = _shipped_defaults()
        stages = {s: shipped[s] for s in ("sanitize", "upgrade_opset", "precision")}
        yield f"wild-{model.name}-default", onnx.load(str(found[0])), stages, _data(inputs)
        if model.recipe:
            cfg = recipe_config(model.recipe)
            recipe = {s: OmegaConf.to_container(cfg[s], resolve=True) for s in ("sanitize", "upgrade_opset", "precision")}
            yield f"wild-{model.name}-{model.recipe}", onnx.load(str(found[0])), recipe, _data(inputs)


def _fuzz_cases(count: int = 24):
    """Mutated graphs of the fuzzer (bench/fuzz/fuzz_graphs.py); the few that reach the precision stage are kept."""
    import warnings

    import onnx
    from bench.corpus.corpus_case import _shipped_defaults
    from bench.fuzz.fuzz_graphs import mutated_models

    shipped = _shipped_defaults()
    stages = {s: shipped[s] for s in ("sanitize", "upgrade_opset", "precision")}
    strategy = mutated_models()
    for index in range(count):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # hypothesis: .example() is meant for interactive use
            model = onnx.load_from_string(strategy.example())
        yield f"fuzz-{index}", model, stages, _data({"x": {"low": -1.0, "high": 1.0, "dtype": "float32"}})


GROUPS = {"builtin": _builtin_cases, "encoders": _encoder_cases, "fuzz": _fuzz_cases, "wild": _wild_cases}


def prepare(work: Path, groups: list[str]) -> None:
    import onnx
    from trtpipe.graph.sanitize import sanitize_model
    from trtpipe.graph.upgrade import upgrade_model

    for group in groups:
        for name, model, stages, data in GROUPS[group]():
            target = work / name
            target.mkdir(parents=True, exist_ok=True)
            raw, clean, upgraded = target / "raw.onnx", target / "sanitized.onnx", target / "input.onnx"
            onnx.save(model, str(raw))
            try:
                sanitize_model(raw, clean, **stages["sanitize"])
                upgrade = stages["upgrade_opset"]
                upgrade_model(clean, upgraded, target_opset=upgrade["target"], fuse_layernorm=upgrade["fuse_layernorm"])
            except Exception as error:  # not a precision case
                print(f"{name}: skipped ({type(error).__name__}: {error})"[:200])
                shutil.rmtree(target)
                continue
            (target / "config.json").write_text(json.dumps({**stages["precision"], "data": data}, indent=1))
            raw.unlink()
            clean.unlink()
            print(f"{name}: prepared", flush=True)


def run(work: Path, out: Path, only: list[str]) -> None:
    from trtpipe.stages.precision import PlanPrecision

    seconds = {}
    for case in sorted(p for p in work.iterdir() if (p / "config.json").exists()):
        if only and not any(o in case.name for o in only):
            continue
        target = out / case.name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        config = json.loads((case / "config.json").read_text())
        start = time.perf_counter()
        try:
            PlanPrecision().run({"model": case / "input.onnx"}, config, target)
            status = "ok"
        except Exception as error:
            status = f"{type(error).__name__}: {error}"[:300]
        seconds[case.name] = time.perf_counter() - start
        (target / "status.txt").write_text(status + "\n")
        print(f"{case.name}: {status} {seconds[case.name]:.3f}s", flush=True)
    (out / "seconds.json").write_text(json.dumps(seconds, indent=1))


def compare(first: Path, second: Path) -> int:
    different = 0
    for case in sorted(p for p in first.iterdir() if p.is_dir()):
        other = second / case.name
        problems = []
        for name in ("status.txt", "model.onnx"):
            a, b = case / name, other / name
            if a.exists() != b.exists() or (a.exists() and a.read_bytes() != b.read_bytes()):
                problems.append(name)
        a, b = case / "precision_plan.json", other / "precision_plan.json"
        if a.exists() != b.exists() or (a.exists() and json.loads(a.read_text()) != json.loads(b.read_text())):
            problems.append("precision_plan.json")
        different += bool(problems)
        print(f"{case.name}: {'DIFFERENT ' + ', '.join(problems) if problems else 'same'}")
    print(f"{different} case(s) differ")
    return 1 if different else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("work", type=Path)
    p.add_argument("--groups", nargs="*", default=list(GROUPS), choices=list(GROUPS))
    r = sub.add_parser("run")
    r.add_argument("work", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--only", nargs="*", default=[])
    c = sub.add_parser("compare")
    c.add_argument("first", type=Path)
    c.add_argument("second", type=Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.work, args.groups)
    elif args.command == "run":
        args.out.mkdir(parents=True, exist_ok=True)
        run(args.work, args.out, args.only)
    else:
        return compare(args.first, args.second)
    return 0


if __name__ == "__main__":
    sys.exit(main())
