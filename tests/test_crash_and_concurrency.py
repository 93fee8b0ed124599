"""Crash safety and concurrency with real processes: SIGKILL in the middle of a stage,
several runs sharing one cache, and a lock whose holder died."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe

LAYERS, WIDTH = 4, 2048  # 4 x 16 MiB of weights: writing the model takes long enough to interrupt


def large_model(path: Path, opset: int = 17) -> None:
    rng = np.random.default_rng(0)
    nodes, weights, current = [], [], "x"
    for index in range(LAYERS):
        weights.append(numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH), np.float32) * 0.01, f"w{index}"))
        nodes.append(helper.make_node("MatMul", [current, f"w{index}"], [f"h{index}"], name=f"/layer{index}/MatMul"))
        current = f"h{index}"
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                              [helper.make_tensor_value_info(current, TensorProto.FLOAT, [1, WIDTH])], weights)
    onnx.save(helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", opset)]), str(path))


def start_trtpipe(workdir: Path, cache: Path, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "TRTPIPE_CACHE": str(cache)}
    return subprocess.Popen([sys.executable, "-m", "trtpipe", *overrides], cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_sigkill_mid_stage_leaves_nothing_that_is_ever_used(tmp_path):
    large_model(tmp_path / "big.onnx")
    cache = tmp_path / "cache"
    overrides = ["model.path=big.onnx", "stages=[sanitize]", "sanitize.fold_constants=false"]
    victim = start_trtpipe(tmp_path, cache, *overrides, "hydra.run.dir=killed")
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until the stage is writing its output
        partial = [p for p in (cache / "tmp").glob("*/entry/model.onnx*")] if (cache / "tmp").exists() else []
        if partial and partial[0].stat().st_size > 0:
            break
        time.sleep(0.005)
    else:
        raise AssertionError("the stage never started writing")
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert list((cache / "tmp").iterdir()), "the kill came too late to test anything"
    assert not (cache / "entries" / "sanitize").exists() or not list((cache / "entries" / "sanitize").iterdir())

    rerun = run_trtpipe(tmp_path, *overrides, cache=cache, run_name="rerun")
    clean = run_trtpipe(tmp_path, *overrides, cache=tmp_path / "clean-cache", run_name="clean")
    assert rerun.code == 0 and clean.code == 0, rerun.stderr + clean.stderr
    assert rerun.statuses() == {"sanitize": "ran"}
    assert rerun.manifest["stages"][0]["outputs"] == clean.manifest["stages"][0]["outputs"]
    assert list((cache / "tmp").iterdir()) == []  # the dead process's temporary was removed


def test_concurrent_runs_compute_each_stage_once(tmp_path):
    cache = tmp_path / "cache"
    runs = [start_trtpipe(tmp_path, cache, "+recipe=transformer_fp16", f"hydra.run.dir=run{i}") for i in range(3)]
    assert [p.wait(timeout=300) for p in runs] == [0, 0, 0]
    manifests = [json.loads((tmp_path / f"run{i}" / "manifest.json").read_text()) for i in range(3)]
    for position, stage in enumerate(manifests[0]["stages"]):
        statuses = sorted(m["stages"][position]["status"] for m in manifests)
        expected = ["deferred"] * 3 if stage["name"] == "build" else ["cached", "cached", "ran"]
        assert statuses == expected, (stage["name"], statuses)
        assert len({json.dumps(m["stages"][position]["outputs"]) for m in manifests}) == 1


def test_a_lock_whose_holder_died_does_not_block(tmp_path):
    from trtpipe.cache.cache import ArtifactCache, cache_key

    material = {"stage": "sanitize", "version": "1", "config": {}, "inputs": {}, "tools": {}}
    cache = ArtifactCache(tmp_path)
    lock_file = tmp_path / "locks" / f"{cache_key(material)}.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from filelock import FileLock; "
        f"lock = FileLock({str(lock_file)!r}); lock.acquire(); print('held', flush=True); time.sleep(600)")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    started = time.monotonic()

    def compute(out_dir: Path) -> dict:
        (out_dir / "m.bin").write_text("x")
        return {"outputs": {"model": "m.bin"}}

    assert cache.get_or_compute("sanitize", material, compute).status == "ran"
    assert time.monotonic() - started < 5
