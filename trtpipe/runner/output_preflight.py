"""`validate.outputs.<name>` (and `validate.float_model`) checked against the model before any stage runs
(issue 24, item 6; issue 31, item 4).

A misspelled output name was found by the validate stage, after every other stage had run.
Decisions:
- The names validate compares are the model's outputs, which no stage renames or drops
  (sanitize, upgrade_opset and precision keep graph outputs by name), and those promote_outputs
  adds. The message and its pasteable Fix are the validate stage's (config/output_names.py),
  which still checks the final graph.
- A name a promote_outputs tensor pattern may expose (`t`, `t__fp32`: graph/promote.py
  `may_expose`, decided from the names) is left to the validate stage; with node patterns every
  name is (a node's output names are known only in the graph the earlier stages make).
- The model is read without its weights, and only when some name needs it; a sweep's
  pre-flight (`check_before_sweep`) runs the same check for every composed value, so a typo in
  the last value is refused before the first job.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf


def check_validate_outputs(cfg: DictConfig, stage_names: list[str], source_path: Path) -> None:
    """UserError (exit 2) for the first `validate.outputs` name that no output of the model can be."""
    unsure = _names_to_check(cfg, stage_names)
    if not unsure:
        return
    from trtpipe.config.output_names import check_output_names
    from trtpipe.onnxmodel.onnx_io import load_model

    outputs = [value.name for value in load_model(source_path, load_external_data=False).graph.output]
    check_output_names("validate.outputs", unsure, outputs)


def check_build_profiles(cfg: DictConfig, stages, source_path: Path) -> None:
    """UserError (exit 2) naming build.profiles for a profile that does not fit the model's inputs,
    before its opt shapes size any sample input (trt/profiles.py, check_profiles_fit)."""
    build = cfg.get("build")
    if build is None or not build.get("profiles"):
        return
    if not any(stage.name == "build" or stage.uses_data or stage.uses_data_shapes for stage in stages):
        return
    from trtpipe.onnxmodel.onnx_io import load_model
    from trtpipe.trt.profiles import check_profiles_fit  # no tensorrt import

    check_profiles_fit(load_model(source_path, load_external_data=False),
                       OmegaConf.to_container(build.profiles, resolve=True))


def check_before_sweep(cfg: DictConfig, start_dir: Path) -> None:
    """The same check for one composed config of a sweep, before any job runs (the model named by
    the config: the user's file, or the built-in one, generated in the cache as the job would)."""
    stage_names = [str(name) for name in cfg.stages]
    if not _names_to_check(cfg, stage_names) and not _float_model(cfg, stage_names):
        return
    from trtpipe.source import resolve_model_source

    cache_root = Path(cfg.cache.dir).expanduser()
    cache_root = cache_root if cache_root.is_absolute() else start_dir / cache_root
    source_path = resolve_model_source(cfg.model.path, cfg.model.builtin, cache_root, start_dir)
    check_validate_outputs(cfg, stage_names, source_path)
    check_float_model(cfg, stage_names, source_path, start_dir)


def check_float_model(cfg: DictConfig, stage_names: list[str], source_path: Path, start_dir: Path) -> None:
    """UserError (exit 2) for a `validate.float_model` that is missing, not ONNX, or has other inputs or
    outputs than the model (trtpipe/validate/float_model.py), before any stage runs."""
    if not _float_model(cfg, stage_names):
        return
    from trtpipe.validate.float_model import checked_float_model

    checked_float_model(cfg.validate.float_model, source_path, start_dir)


def _float_model(cfg: DictConfig, stage_names: list[str]):
    # precision reads it too (precision.search.float_model: the anchor of the repair's and search's trials)
    validate = cfg.get("validate")
    return bool({"validate", "precision"} & set(stage_names)) and validate is not None and validate.get("float_model")


def _names_to_check(cfg: DictConfig, stage_names: list[str]) -> dict:
    """The `validate.outputs` entries whose names only the model's outputs can make valid."""
    validate = cfg.get("validate")
    if "validate" not in stage_names or validate is None or not validate.get("outputs"):
        return {}
    configured = OmegaConf.to_container(validate.outputs, resolve=True)
    promote = cfg.get("promote_outputs") if "promote_outputs" in stage_names else None
    if promote is not None and promote.get("nodes"):
        return {}
    if promote is not None and promote.get("tensors") and isinstance(configured, dict):
        from trtpipe.graph.promote import may_expose

        patterns = [str(pattern) for pattern in promote.tensors]
        configured = {name: values for name, values in configured.items()
                      if not may_expose(str(name), patterns, promote.match)}
    return configured
