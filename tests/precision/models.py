"""Built-in models after the real sanitize and upgrade_opset passes, as the precision
stage sees them (cached per test session: generation is deterministic)."""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from tempfile import TemporaryDirectory

import onnx

from trtpipe.onnxmodel.onnx_io import load_model
from trtpipe.graph.sanitize import sanitize_model
from trtpipe.graph.upgrade import upgrade_model
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model

DEFAULT_PRECISION = {
    "default": "fp16", "rules": {}, "keep_io_types": True, "on_unmatched": "error", "respect_authored": True,
    "auto": {"max_abs": 4096.0, "constants": "keep_fp32", "normalization": True, "softmax": False,
             "island_size": 0, "protect": "evidence", "fewest_casts": False},
    "search": {"enabled": False, "max_trials": 30, "tolerance": {}, "outputs": {}},
    # Off: these tests judge the automatic plan itself (tests/search/test_repair.py and
    # tests/test_cli_repair.py test the repair, which the shipped configs turn on).
    "repair": False,
    "list_only": False,
}


@lru_cache(maxsize=None)
def _prepared_bytes(name: str, fuse: bool) -> bytes:
    with TemporaryDirectory() as tmp:
        src, clean, upgraded = Path(tmp, "src.onnx"), Path(tmp, "clean.onnx"), Path(tmp, "up.onnx")
        onnx.save(builtin_model(name), str(src))
        sanitize_model(src, clean)
        upgrade_model(clean, upgraded, fuse_layernorm=fuse)
        return load_model(upgraded).SerializeToString()


def prepared(name: str, fuse: bool = True) -> onnx.ModelProto:
    return onnx.load_from_string(_prepared_bytes(name, fuse))


def precision_config(**changes) -> dict:
    config = copy.deepcopy(DEFAULT_PRECISION)
    for key, value in changes.items():
        if key == "auto":
            config["auto"].update(value)
        else:
            config[key] = value
    return config


def data_block(name: str, iterations: int = 2) -> dict:
    return {"seed": 0, "iterations": iterations, "inputs": BUILTIN_INPUT_SPECS[name], "path": None, "sha256": None}
