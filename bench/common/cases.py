"""The models the benchmark converts, as raw exports, with the configs trtpipe's recipe gives each stage.

A case is a model, the recipe trtpipe would use for it, and its sample-input
specs. `prepare_case` writes the raw export (the file both tools start from),
resolves the recipe's `sanitize`, `upgrade_opset` and `precision` configs (the
last with the `data` block the stage receives) and draws held-out evaluation
inputs. Nothing is converted here: the whole path, from the raw file to the
mixed ONNX, is what the benchmark times (converters.py).

Decisions:
- Configs come from composing the shipped recipe with Hydra (as `trtpipe
  +recipe=...` would), not from a copy, so the benchmark converts with exactly
  the rules users get.
- Evaluation inputs use a different seed (`EVAL_SEED`) from the planning
  inputs the recipe's `data.seed` gives the range rule: accuracy is measured
  on inputs neither tool's plan was derived from (AutoCast's defaults draw
  their own random calibration inputs). `prepare_case` refuses a recipe whose
  seed equals `EVAL_SEED`.
- `EVAL_SAMPLES` (64) held-out inputs per model: the paired accuracy verdict
  (paired_accuracy.py) needs many samples for its interval to be narrow; the
  emulator runs them in ~0.3 s per model and tool at 24 layers.
- Every built-in model is a case (`BUILTIN_RECIPES`: t5 and gpt2 with
  `transformer_fp16`, as its header names them), since issue 16's target is
  stated for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import onnx
from omegaconf import OmegaConf

from bench.common.encoders import INPUT_SPECS as ENCODER_INPUT_SPECS
from bench.common.encoders import build_encoder
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model

EVAL_SEED = 1
EVAL_SAMPLES = 64  # held-out inputs per model: enough for the paired verdict's interval (paired_accuracy.py)


@dataclass(frozen=True)
class Case:
    name: str
    recipe: str
    build: Callable[[], onnx.ModelProto]
    input_specs: dict


@dataclass
class PreparedCase:
    case: Case
    raw_path: Path  # the raw export both tools convert
    stage_configs: dict  # stage name -> resolved config, in the recipe's order; precision's has the `data` block
    eval_feeds: list[dict]


TRTPIPE_STAGES = ("sanitize", "upgrade_opset", "precision")


BUILTIN_RECIPES = {"transformer": "transformer_fp16", "nafnet": "nafnet_fp16", "mixed_precision": "mixed_precision",
                   "t5": "transformer_fp16", "gpt2": "transformer_fp16"}  # every built-in model, its shipped recipe
BUILTIN_CASES = [
    Case(name, recipe, (lambda n=name: builtin_model(n)), BUILTIN_INPUT_SPECS[name])
    for name, recipe in BUILTIN_RECIPES.items()
]


def encoder_case(layers: int, hidden: int | None = None) -> Case:
    """The bench encoder of `layers` layers; `hidden` another width than the built-in model's 64 (encoders.py)."""
    if hidden is None:
        return Case(f"encoder-{layers}", "transformer_fp16", lambda: build_encoder(layers), ENCODER_INPUT_SPECS)
    return Case(f"encoder-{layers}-h{hidden}", "transformer_fp16", lambda: build_encoder(layers, hidden),
                ENCODER_INPUT_SPECS)


def prepare_case(case: Case, work_dir: Path) -> PreparedCase:
    """Write `case`'s raw export into work_dir and resolve its recipe's stage configs."""
    from trtpipe.numerics.inputs import generate_inputs

    cfg = recipe_config(case.recipe)
    if int(cfg.data.seed) == EVAL_SEED:
        raise SystemExit(f"recipe {case.recipe} plans with data.seed {EVAL_SEED}, the evaluation seed: "
                         "accuracy would not be held out")
    work_dir.mkdir(parents=True, exist_ok=True)
    raw = work_dir / "raw.onnx"
    model = case.build()
    onnx.save(model, str(raw))
    # The recipe's own stages, in its order, up to the mixed ONNX (build and validate are not compared).
    configs = {stage: OmegaConf.to_container(cfg[stage], resolve=True) for stage in cfg.stages if stage in TRTPIPE_STAGES}
    configs["precision"]["data"] = {"seed": int(cfg.data.seed), "iterations": int(cfg.data.iterations),
                                    "inputs": case.input_specs, "path": None, "sha256": None}
    eval_feeds = generate_inputs(model, case.input_specs, EVAL_SEED, EVAL_SAMPLES)
    return PreparedCase(case, raw, configs, eval_feeds)


def recipe_config(recipe: str):
    """The composed, checked config of `trtpipe +recipe=<recipe>`."""
    from trtpipe.config.locate import conf_dir
    from trtpipe.config.preflight import compose_checked
    from trtpipe.config.store import register_configs

    register_configs()
    return compose_checked(conf_dir(), [f"+recipe={recipe}"])
