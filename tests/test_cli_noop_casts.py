"""Issue 30 item 2 through the real command line: a Cast to the type a tensor already has is no precision decision.

A small ResNet-style export with the no-op `Cast(to=FLOAT)` exporters write
(tests/graph/resnet_casts.py: 18 of them, one writing the graph output) and its
twin without them, each through sanitize -> upgrade_opset -> precision: the
export gets no more Casts than the twin, in the plan's totals and in the written
model, and sanitize's line says how many it removed. Before sanitize removed them
the export got 12 Casts, 4 FP32 nodes and 8 Casts "kept as authored"; the twin 2.
"""

from __future__ import annotations

import json

import onnx
import pytest

from tests.cli_helpers import run_trtpipe
from tests.graph.resnet_casts import cast_count, resnet_style

STAGES = "stages=[sanitize,upgrade_opset,precision]"


def _output(run, stage_name: str, kind: str):
    stage = next(s for s in run.manifest["stages"] if s["name"] == stage_name)
    return run.run_dir / stage["outputs"][kind]["path"]


def _stage_line(stdout: str, stage: str) -> str:
    return [line for line in stdout.splitlines() if line.strip().startswith(f"{stage} ")][-1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("noop_casts")
    result = {}
    for name, noop_casts in (("with", True), ("without", False)):
        source = workdir / f"{name}.onnx"
        onnx.save(resnet_style(noop_casts=noop_casts), str(source))
        result[name] = run_trtpipe(workdir, f"model.path={source}", STAGES, run_name=name)
        assert result[name].code == 0, result[name].stdout + result[name].stderr
    return result


def test_the_export_gets_no_more_casts_than_its_twin(runs):
    plans = {name: json.loads(_output(run, "precision", "plan").read_text()) for name, run in runs.items()}
    models = {name: onnx.load(str(_output(run, "precision", "model"))) for name, run in runs.items()}
    assert plans["with"]["totals"]["casts"] == plans["without"]["totals"]["casts"] == {"once": 2, "per_step": {}}
    assert cast_count(models["with"]) == cast_count(models["without"]) == 2
    assert plans["with"]["totals"]["nodes"] == plans["without"]["totals"]["nodes"]  # no FP32, nothing "kept"
    assert {n["name"]: n["precision"] for n in plans["with"]["nodes"]} == \
        {n["name"]: n["precision"] for n in plans["without"]["nodes"]}
    assert [value.name for value in models["with"].graph.output] == ["logits"]


def test_the_sanitize_line_says_how_many_casts_it_removed(runs):
    assert "46 -> 28 nodes, 0 folded; 18 no-op Cast(s) removed" in _stage_line(runs["with"].stdout, "sanitize")
    assert "no-op" not in _stage_line(runs["without"].stdout, "sanitize")
