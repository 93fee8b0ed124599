"""The models the benchmark converts, prepared as the precision stage receives them.

A case is a model, the recipe trtpipe would use for it, and its sample-input
specs. `prepare_case` runs the recipe's own `sanitize` and `upgrade_opset`
stages on it (untimed: they are not what is compared) and returns the prepared
ONNX file both tools convert, the recipe's resolved `precision` config with the
`data` block the stage receives, and held-out evaluation inputs.

Decisions:
- Configs come from composing the shipped recipe with Hydra (as `trtpipe
  +recipe=...` would), not from a copy, so the benchmark converts with exactly
  the rules users get.
- Evaluation inputs use a different seed (`EVAL_SEED`) from the planning
  inputs the recipe's `data.seed` gives the range rule: accuracy is measured
  on inputs neither tool's plan was derived from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import onnx
from omegaconf import OmegaConf

from bench.encoders import INPUT_SPECS as ENCODER_INPUT_SPECS
from bench.encoders import build_encoder
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model

EVAL_SEED = 1
EVAL_ITERATIONS = 2


@dataclass(frozen=True)
class Case:
    name: str
    recipe: str
    build: Callable[[], onnx.ModelProto]
    input_specs: dict


@dataclass
class PreparedCase:
    case: Case
    model_path: Path
    precision_config: dict  # the stage's config: the recipe's `precision` plus the resolved `data`
    eval_feeds: list[dict]


BUILTIN_CASES = [
    Case("transformer", "transformer_fp16", lambda: builtin_model("transformer"), BUILTIN_INPUT_SPECS["transformer"]),
    Case("nafnet", "nafnet_fp16", lambda: builtin_model("nafnet"), BUILTIN_INPUT_SPECS["nafnet"]),
    Case("mixed_precision", "mixed_precision", lambda: builtin_model("mixed_precision"),
         BUILTIN_INPUT_SPECS["mixed_precision"]),
]


def encoder_case(layers: int) -> Case:
    return Case(f"encoder-{layers}", "transformer_fp16", lambda: build_encoder(layers), ENCODER_INPUT_SPECS)


def prepare_case(case: Case, work_dir: Path) -> PreparedCase:
    """Write `case` through its recipe's sanitize and upgrade_opset stages into work_dir."""
    from trtpipe.stages.sanitize import SanitizeModel
    from trtpipe.stages.upgrade_opset import UpgradeOpset
    from trtpipe.numerics.inputs import generate_inputs

    cfg = recipe_config(case.recipe)
    work_dir.mkdir(parents=True, exist_ok=True)
    source = work_dir / "source.onnx"
    onnx.save(case.build(), str(source))
    model_path = source
    for stage in (SanitizeModel, UpgradeOpset):
        out_dir = work_dir / stage.name
        out_dir.mkdir(exist_ok=True)
        config = OmegaConf.to_container(cfg[stage.name], resolve=True)
        outcome = stage().run({"model": model_path}, config, out_dir)
        model_path = out_dir / outcome.outputs["model"]
    data = {"seed": int(cfg.data.seed), "iterations": int(cfg.data.iterations), "inputs": case.input_specs,
            "path": None, "sha256": None}
    precision_config = {**OmegaConf.to_container(cfg.precision, resolve=True), "data": data}
    eval_feeds = generate_inputs(onnx.load(str(model_path)), case.input_specs, EVAL_SEED, EVAL_ITERATIONS)
    return PreparedCase(case, model_path, precision_config, eval_feeds)


def recipe_config(recipe: str):
    """The composed, checked config of `trtpipe +recipe=<recipe>`."""
    from trtpipe.config.locate import conf_dir
    from trtpipe.config.preflight import compose_checked
    from trtpipe.config.store import register_configs

    register_configs()
    return compose_checked(conf_dir(), [f"+recipe={recipe}"])
