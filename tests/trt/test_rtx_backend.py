"""build.backend=tensorrt_rtx where no TensorRT-RTX device is (this machine, CI): the config check,
the deferral, the cache key, the provider options, and validate's handling of an EPContext engine.
Nothing here fakes a GPU; the real EP building real engines (in the stand-in sandbox) is
tests/test_rtx_oracle.py (marker `rtx`)."""

from __future__ import annotations

import ast
import json
import re

import onnx
import pytest
from onnx import helper

from tests.cli_helpers import run_trtpipe
from tests.precision.models import data_block, prepared
from tests.trt.fake_tensorrt import FakeTensorRTBackend
from trtpipe.errors import UserError
from trtpipe.stages.build import BuildEngine
from trtpipe.stages.validate import ValidateAccuracy
from trtpipe.trt.rtx.options import provider_options
from trtpipe.trt.seam import BuildOptions

UP_TO_BUILD = "stages=[sanitize,upgrade_opset,precision,build]"


@pytest.fixture
def no_ep(tmp_path, monkeypatch):
    """$TRTPIPE_RTX_HOME names an empty folder: the EP is not installed, whatever this machine holds."""
    home = tmp_path / "no-rtx-here"
    home.mkdir()
    monkeypatch.setenv("TRTPIPE_RTX_HOME", str(home))
    return {"TRTPIPE_RTX_HOME": str(home)}


def test_a_target_that_is_not_an_rtx_architecture_is_one_line_exit_2(tmp_path):
    run = run_trtpipe(tmp_path, UP_TO_BUILD, "build.backend=tensorrt_rtx", "build.rtx.target_sm=sm90")
    out = (run.stdout + run.stderr).strip().splitlines()
    assert run.code == 2, out
    assert len(out) == 1 and "build.rtx.target_sm is 'sm90'" in out[0], out
    assert "sm86, sm89, sm120, sm121" in out[0] and "build.rtx.target_sm=sm89" in out[0]
    assert not run.run_dir.exists() and not (tmp_path / "cache" / "entries").exists()  # nothing half-written


def test_without_the_ep_the_build_is_deferred_with_one_line_saying_how_to_finish(tmp_path, no_ep):
    run = run_trtpipe(tmp_path, UP_TO_BUILD, "build.backend=tensorrt_rtx", env=no_ep)
    assert run.code == 0, run.stdout + run.stderr
    assert run.statuses()["build"] == "deferred"
    line = next(ln for ln in (run.stdout + run.stderr).splitlines() if "DEFERRED" in ln)
    assert "no TensorRT-RTX engine built: the TensorRT-RTX execution provider (onnxruntime-ep-nv-tensorrt-rtx-cu12) " \
           f"is not installed in $TRTPIPE_RTX_HOME ({no_ep['TRTPIPE_RTX_HOME']}). To finish on a Linux or Windows " \
           "machine with an RTX GPU" in line
    assert "trtpipe[" not in line  # trtpipe is not on the package index: no extra to name
    assert "pip install onnxruntime-ep-nv-tensorrt-rtx-cu12==0.5.0" in line and line.rstrip().endswith(
        "(no earlier entry of this stage in the cache)") and "python build/build_on_gpu.py" in line
    build = next(s for s in run.manifest["stages"] if s["name"] == "build")
    assert "engine" not in build["outputs"] and "build_script" in build["outputs"]
    script = (run.run_dir / "build" / "build_on_gpu.py").read_text()
    carried = json.loads(ast.literal_eval(re.search(r"^BUILD_CONFIG = json.loads\((.*)\)$", script, re.M).group(1)))
    assert "pip install onnxruntime-ep-nv-tensorrt-rtx-cu12==0.5.0" in script
    assert carried["backend"] == "tensorrt_rtx" and carried["rtx"] == {"target_sm": "sm89"}
    assert "timing_cache" not in carried and "tensorrt_version" not in carried  # only what is in the key
    assert "these trtexec commands are the same build for TensorRT 10.x/11.x" in \
        (run.run_dir / "build" / "trtexec.txt").read_text()
    # Another target, and the TensorRT backend, are other builds (other cache keys), deferred too.
    for other in ("build.rtx.target_sm=sm120", "build.backend=tensorrt"):
        again = run_trtpipe(tmp_path, UP_TO_BUILD, "build.backend=tensorrt_rtx", other, env=no_ep,
                            run_name=other.split("=")[1])
        assert again.statuses()["build"] == "deferred", again.stdout + again.stderr
        assert next(s for s in again.manifest["stages"] if s["name"] == "build")["key"] != build["key"]


def test_the_key_holds_the_ep_and_tensorrt_rtx_versions_and_the_target(no_ep):
    facts = BuildEngine.key_facts(config={"backend": "tensorrt_rtx", "rtx": {"target_sm": "sm120"}})
    assert facts == {"backend": "tensorrt_rtx", "ep": None, "tensorrt_rtx": None, "target_sm": "sm120",
                     "device_visible": False}
    config = {"backend": "tensorrt", "rtx": {"target_sm": "sm89"}, "timing_cache": True, "tensorrt_version": None}
    assert "rtx" not in BuildEngine.key_config(config)  # not read by the TensorRT backend
    rtx = BuildEngine.key_config({**config, "backend": "tensorrt_rtx"})
    assert rtx["rtx"] == {"target_sm": "sm89"} and "timing_cache" not in rtx and "tensorrt_version" not in rtx


def test_the_ep_versions_are_read_from_the_wheel_s_files(tmp_path, monkeypatch):
    from trtpipe.trt.rtx import plugin

    package = tmp_path / plugin.PACKAGE
    package.mkdir()
    (package / plugin.PLUGIN).write_bytes(b"")
    (package / "_version.py").write_text('__version__ = "0.5.0"\n')
    for name in ("libtensorrt_rtx.so.1", "libtensorrt_rtx.so.1.7.1", "libtensorrt_rtx.so"):
        (package / name).write_bytes(b"")
    monkeypatch.setenv(plugin.HOME_VARIABLE, str(tmp_path))
    assert plugin.package_dir() == package
    assert (plugin.ep_version(package), plugin.tensorrt_rtx_version(package)) == ("0.5.0", "1.7.1")


def test_one_profile_becomes_the_ep_s_shape_options_and_unhonoured_settings_are_refused():
    profile = {"a": {"min": [1, 8], "opt": [4, 8], "max": [16, 8]}, "b": {"min": [1, 8], "opt": [4, 8], "max": [16, 8]}}
    options = provider_options(BuildOptions(profiles=(profile,), memory_pool_limits={"workspace": 2**30}))
    assert options == {"nv_profile_min_shapes": "a:1x8,b:1x8", "nv_profile_opt_shapes": "a:4x8,b:4x8",
                       "nv_profile_max_shapes": "a:16x8,b:16x8", "nv_max_workspace_size": str(2**30)}
    for refused, words in ((BuildOptions(precision_mode="constraints"), "strongly typed only"),
                           (BuildOptions(tf32=True), "build.tf32=True has no TensorRT-RTX EP option"),
                           (BuildOptions(plugins=("/x.so",)), "build.plugins"),
                           (BuildOptions(memory_pool_limits={"tactic_dram": 1}), "memory_pool_limits"),
                           (BuildOptions(profiles=(profile, profile)), "one optimization profile")):
        with pytest.raises(UserError, match=words):
            provider_options(refused)


def _epcontext_model(path):
    """An EPContext model as the EP writes it (one com.microsoft EPContext node holding the engine);
    the bytes are not an engine: without a device validate must not open it."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 16, 16])
    node = helper.make_node("EPContext", ["x"], ["y"], domain="com.microsoft", name="ctx", embed_mode=1,
                            ep_cache_context=b"not an engine", source="NvTensorRTRTXExecutionProvider")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, str(path))


def test_validate_takes_an_epcontext_engine_as_tensorrt_rtx_and_says_why_it_cannot_run_it_here(tmp_path, no_ep):
    model = tmp_path / "model.onnx"
    onnx.save(prepared("nafnet"), str(model))
    _epcontext_model(tmp_path / "model_ctx.onnx")
    seam = FakeTensorRTBackend()  # an EPContext model is never handed to the TensorRT seam
    out = tmp_path / "out"
    out.mkdir()
    config = {"candidates": ["emulated", "tensorrt"], "tolerance": {"cosine_min": 0.999, "psnr_min": 40.0},
              "outputs": {}, "localize": True, "localize_threshold": 0.01, "plot": False, "min_compared": 0.5,
              "data": data_block("nafnet")}
    inputs = {"model": model, "reference": model, "engine": tmp_path / "model_ctx.onnx"}
    outcome = ValidateAccuracy(backend=seam).run(inputs, config, out)
    report = json.loads((out / "validation.json").read_text())
    assert [c["name"] for c in report["candidates"]] == ["emulated"] and report["passed"] and not seam.runs
    note = next(n for n in report["notes"] if n.startswith("candidate tensorrt"))
    assert "TensorRT-RTX EPContext model and cannot run here: the TensorRT-RTX execution provider" in note
    assert "is not installed" in note and "RTX GPU" in note and outcome.failed is None
    # Where the EP is not installed, validate's key is what it was; the device fact joins it with the EP.
    assert ValidateAccuracy.key_facts(config) == {}
