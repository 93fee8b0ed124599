"""Models from the wild in the test suite: Silero VAD v6 as faster-whisper ships it, and
Silero VAD with If subgraphs from silero-vad's own wheel (at the end of this file).

The model (1.2 MB, from a 1.1 MB wheel pinned by sha256 in bench/wild/wild_models.py) has
what the built-in models do not: an ONNX `LSTM` with initial-state graph inputs, a
dynamic `seq_len` dimension given by dim_param, and a PyTorch 2.8 export at opset 18.
The real command line runs on it with the default config and the overrides its users
type (window shape and value ranges, an optimisation profile).

The download needs the package index (CI has it). If it fails, the test fails with
the reason: it never skips silently.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bench.wild.wild_models import BY_NAME, WildFetchError, fetch

REPO = Path(__file__).resolve().parent.parent
MODEL = BY_NAME["silero_vad_v6_fw"]


@pytest.fixture(scope="module")
def model_path() -> Path:
    try:
        return fetch(MODEL.name)
    except WildFetchError as error:
        pytest.fail(f"cannot fetch the wild model {MODEL.name} ({MODEL.package}=={MODEL.version}) "
                    f"from the package index: {error}")


@pytest.fixture(scope="module")
def run(model_path: Path, tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("wild")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    for name in ("TRTPIPE_CACHE", "TRTPIPE_DEBUG"):
        env.pop(name, None)
    command = [sys.executable, "-m", "trtpipe", "--json", f"model.path={model_path}",
               f"cache.dir={work / 'cache'}", f"hydra.run.dir={work / 'run'}", *MODEL.overrides]
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {"code": done.returncode, "stderr": done.stderr, "report": report, "run_dir": Path(report["run_dir"])}


def test_fetch_verifies_the_pinned_digests(model_path: Path):
    from bench.wild.wild_models import sha256_of

    assert sha256_of(model_path) == MODEL.member_sha256
    assert model_path.stat().st_size == MODEL.size
    ops = {node.op_type for node in onnx.load(str(model_path)).graph.node}
    assert "LSTM" in ops  # what the built-in models lack


def test_cli_ends_in_a_validation_verdict_without_traceback(run: dict):
    code, report = run["code"], run["report"]
    assert code in (0, 1), f"exit {code}: {run['stderr'][-2000:]}"
    assert report["exit_code"] == code
    assert "Traceback" not in run["stderr"]
    assert "Traceback" not in (run["run_dir"] / "trtpipe.log").read_text()
    statuses = {stage["name"]: stage["status"] for stage in report["stages"]}
    assert statuses["sanitize"] == statuses["upgrade_opset"] == statuses["precision"] == "ran"
    assert statuses["build"] in ("deferred", "ran")
    assert report["validation"] is not None
    assert statuses["validate"] == ("ran" if code == 0 else "failed")
    assert bool(report["validation"]["passed"]) == (code == 0)


def test_plan_and_mixed_precision_model_are_sound(run: dict, model_path: Path):
    precision = run["run_dir"] / "precision"
    plan = json.loads((precision / "precision_plan.json").read_text())
    original = onnx.load(str(model_path))
    # Every node of the sanitized graph is planned; the LSTM is among them.
    assert any(node["op_type"] == "LSTM" for node in plan["nodes"])
    totals = plan["totals"]
    assert 0.0 <= totals["low_precision_flop_share"] <= 1.0
    assert totals["flops"]["total"] > 0  # the Conv encoder is counted
    onnx.checker.check_model(str(precision / "model.onnx"), full_check=True)
    # The mixed-precision model keeps the graph's interface and runs in ONNX Runtime.
    mixed = onnx.load(str(precision / "model.onnx"))
    assert [i.name for i in mixed.graph.input] == [i.name for i in original.graph.input]
    assert [o.name for o in mixed.graph.output] == [o.name for o in original.graph.output]
    session = ort.InferenceSession(str(precision / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {"input": rng.uniform(-1, 1, (4, 576)).astype(np.float32),
             "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}
    probs = session.run(None, feeds)[0]
    assert probs.shape == (4,) and np.all((probs >= 0) & (probs <= 1))


# --- Silero VAD with If subgraphs (silero-vad's own wheel) ------------------------------------------
# 25 `If` nodes (nested, selecting the 8/16 kHz path) and 4 `LSTM`s inside the branches: what the
# issue's "subgraphs are first-class" and "sanitize never breaks a valid model" are about. Before,
# sanitize's constant folding broke it and blamed the model (exit 2); with folding off the plan
# labelled the Ifs fp16 while their bodies stayed FP32 (0% FLOPs converted).
IF_MODEL = BY_NAME["silero_vad"]


@pytest.fixture(scope="module")
def if_run(tmp_path_factory) -> dict:
    try:
        path = fetch(IF_MODEL.name)
    except WildFetchError as error:
        pytest.fail(f"cannot fetch the wild model {IF_MODEL.name} ({IF_MODEL.package}=={IF_MODEL.version}): {error}")
    work = tmp_path_factory.mktemp("wild_if")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    for name in ("TRTPIPE_CACHE", "TRTPIPE_DEBUG"):
        env.pop(name, None)
    command = [sys.executable, "-m", "trtpipe", "--json", f"model.path={path}", f"cache.dir={work / 'cache'}",
               f"hydra.run.dir={work / 'run'}", *IF_MODEL.overrides]
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=180)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {"code": done.returncode, "stderr": done.stderr, "report": report, "run_dir": Path(report["run_dir"])}


def test_the_lstms_in_if_branches_with_y_unread_are_the_builders_warning(if_run: dict):
    """TensorRT-RTX's builder refuses them (trtpipe/trt/parser/builder_limits.py); for the default
    TensorRT backend, whose builder was not measured, the op check warns and the run goes on."""
    (line,) = [ln for ln in if_run["stderr"].splitlines() if "the builder stops" in ln]
    assert "LSTM (4 node(s)" in line and "builder was not measured" in line


def test_if_subgraph_model_passes_with_its_bodies_converted(if_run: dict):
    assert if_run["code"] == 0, if_run["stderr"][-2000:]
    assert "Traceback" not in if_run["stderr"]
    plan = json.loads((if_run["run_dir"] / "precision" / "precision_plan.json").read_text())
    nodes = {node["name"]: node for node in plan["nodes"]}
    ifs = [node for node in plan["nodes"] if node["op_type"] == "If"]
    body_nodes = [name for name in nodes if "/then_branch/" in name or "/else_branch/" in name]
    assert ifs and len(body_nodes) > len(ifs)  # bodies are planned node by node
    # An If is never labelled with a precision its body does not have.
    for node in ifs:
        prefix = node["name"] + "/"
        inner = {nodes[n]["precision"] for n in body_nodes if n.startswith(prefix)} & {"fp16", "fp32", "bf16"}
        if node["precision"] in ("fp16", "fp32"):
            assert inner <= {node["precision"]}, (node["name"], node["precision"], inner)
    assert any(nodes[n]["op_type"] == "LSTM" and nodes[n]["precision"] == "fp16" for n in body_nodes)
    assert plan["totals"]["low_precision_flop_share"] >= 0.8  # the LSTMs and Convs in the branches count
    onnx.checker.check_model(str(if_run["run_dir"] / "precision" / "model.onnx"), full_check=True)
