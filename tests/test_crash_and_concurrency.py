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


HOLD_UNTIL_STDIN_CLOSES = """
import sys
from pathlib import Path
from trtpipe.cache.locks import held
with held(Path(sys.argv[1]), 5, purpose="x", stage="sanitize"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_wait_for_a_lock_is_on_the_console_and_its_timeout_names_the_live_holder(tmp_path):
    """Issue 22 item 13. Reproduced: while another run held a key's lock the console said nothing
    (the waiting line went only to trtpipe.log), and the timeout said "if no other trtpipe job is
    running, delete that file" although an flock is only ever held by a live process."""
    small = ["model.builtin=mixed_precision", "stages=[sanitize]"]
    key = run_trtpipe(tmp_path, *small, cache=tmp_path / "elsewhere", run_name="key").manifest["stages"][0]["key"]
    cache = tmp_path / "cache"
    assert run_trtpipe(tmp_path, *small, "sanitize.toposort=false", cache=cache, run_name="claim").code == 0
    holder = subprocess.Popen([sys.executable, "-c", HOLD_UNTIL_STDIN_CLOSES, str(cache / "locks" / f"{key}.lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        impatient = run_trtpipe(tmp_path, *small, "cache.lock_timeout=1", cache=cache, run_name="impatient")
        env = {**os.environ, "TRTPIPE_CACHE": str(cache)}
        patient = subprocess.Popen([sys.executable, "-m", "trtpipe", *small, f"hydra.run.dir={tmp_path / 'patient'}"],
                                   cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while "waiting for" not in ((tmp_path / "patient" / "trtpipe.log").read_text()
                                    if (tmp_path / "patient" / "trtpipe.log").exists() else ""):
            assert time.time() < deadline and patient.poll() is None, patient.communicate()
            time.sleep(0.01)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    stdout, stderr = patient.communicate(timeout=120)

    assert impatient.code == 1, impatient.stdout + impatient.stderr
    assert f"waiting for pid {holder.pid} on " in impatient.stdout  # on the console, naming the holder
    error = impatient.manifest["stages"][0]["error"]
    assert f"waited 1 s for pid {holder.pid} on " in error and "still running" in error, error
    assert "delete" not in (impatient.stdout + impatient.stderr).lower()
    assert patient.returncode == 0, stdout + stderr
    assert f"sanitize: waiting for pid {holder.pid} on " in stdout and "sanitize: got the lock after" in stdout
    assert json.loads((tmp_path / "patient" / "manifest.json").read_text())["stages"][0]["status"] == "ran"


def test_a_long_wait_prints_progress(tmp_path, caplog):
    """The waiting line, then progress while the holder keeps the lock (here 2.5 s), then the lock."""
    import logging

    from trtpipe.cache.locks import held

    lock_file = tmp_path / "locks" / "k.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from trtpipe.cache.locks import held\n"
        f"with held(__import__('pathlib').Path({str(lock_file)!r}), 5, purpose='x', stage='sanitize'):\n"
        "    print('held', flush=True); time.sleep(2.5)")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with caplog.at_level(logging.INFO, logger="trtpipe"):
        with held(lock_file, 30, purpose="which is computing the same entry", stage="sanitize"):
            pass
    holder.wait()
    lines = [r.getMessage() for r in caplog.records if r.name == "trtpipe"]
    assert lines[0].startswith(f"  sanitize: waiting for pid {holder.pid} on ") and "(sanitize, since" in lines[0]
    assert any(line.startswith(f"  sanitize: still waiting for pid {holder.pid}") for line in lines), lines
    assert lines[-1].startswith("  sanitize: got the lock after")
