"""The build stage. Tests named `..._with_fake_tensorrt` use the test double at the seam
(FakeTensorRTBackend: no TensorRT runs); the deferred path is real on machines without TensorRT."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from tests.trt.fake_tensorrt import (FAKE_ENVIRONMENT, FakeTensorRTBackend, layer, layers_10x, layers_11x,
                                     tensor_10x, tensor_11x)
from tests.trt.test_trtexec import commands_in
from tests.trt.tiny import write_inputs
from trtpipe.config.build_schema import BuildConfig
from trtpipe.errors import StageFailed, UserError
from trtpipe.cache.hashing import artifact_digest
from trtpipe.stages.build import BuildEngine
from trtpipe.trt.seam import Environment
from trtpipe.trt.timing_cache import timing_cache_name

PROFILE = {"x": {"min": [1, 16, 64], "opt": [2, 16, 64], "max": [4, 16, 64]}}
no_tensorrt = pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None,
                                 reason="TensorRT is installed here; the deferred path needs a machine without it")


def mk(path):
    """The runner hands a stage an existing, empty out_dir."""
    path.mkdir(parents=True, exist_ok=True)
    return path


def config(tmp_path, **changes) -> dict:
    values = OmegaConf.to_container(OmegaConf.structured(BuildConfig), resolve=True)
    return {**values, "cache_dir": str(tmp_path / "cache"), **changes}


def fp32_layernorm_kept() -> dict:
    return layers_10x([
        layer("/ln/LayerNormalization", "Normalization", [tensor_10x("x", "Row major linear FP32")],
              [tensor_10x("ln_out", "Row major linear FP32")], ["/ln/LayerNormalization"]),
        layer("/proj/MatMul", "gemm", [tensor_10x("ln_out", "Row major linear FP32")],
              [tensor_10x("y", "Row major linear FP32")], ["/to_fp16/Cast", "/proj/MatMul", "/to_fp32/Cast"]),
    ])


def layernorm_swallowed_in_fp16() -> dict:
    return layers_11x([layer("{ForeignNode[/ln/LayerNormalization.../to_fp32/Cast]}", "kgen",
                             [tensor_11x("x_half", "Half")], [tensor_11x("y_half", "Half")],
                             ["/ln/LayerNormalization", "/to_fp16/Cast", "/proj/MatMul", "/to_fp32/Cast"])])


def test_builds_the_mixed_onnx_with_the_profiles_with_fake_tensorrt(tmp_path):
    inputs = write_inputs(tmp_path / "in", batch="batch")
    fake = FakeTensorRTBackend(inspector=fp32_layernorm_kept())
    outcome = BuildEngine(backend=fake).run(inputs, config(tmp_path, profiles=[PROFILE], memory_pool_limits={
        "workspace": 1024}, builder_optimization_level=2), mk(tmp_path / "out"))
    assert outcome.status == "ran" and outcome.failed is None
    (call,) = fake.builds
    assert call.onnx_path == inputs["model"] and call.plan["nodes"][0]["name"] == "/ln/LayerNormalization"
    assert call.options.profiles == (PROFILE,) and call.options.precision_mode == "strongly_typed"
    assert call.options.memory_pool_limits == {"workspace": 2**30} and call.options.builder_optimization_level == 2
    assert set(outcome.outputs) == {"engine", "layer_info", "audit", "trtexec", "build_log", "parser_support"}
    out = tmp_path / "out"
    assert all((out / name).is_file() for name in outcome.outputs.values())
    assert (out / "model.engine").read_bytes().startswith(b"FAKE-ENGINE (test double)")
    audit = json.loads((out / "precision_audit.json").read_text())
    assert audit["violations"] == [] and audit["rows"][0]["node"] == "/ln/LayerNormalization"
    assert audit["rows"][0]["realised"] == "fp32" and "ln_out:fp32" in audit["rows"][0]["evidence"]
    text = (out / "trtexec.txt").read_text()
    assert "# TensorRT 10.x  <- in use" in text and "TensorRT in use: 10.9.0.34" in text
    ten, eleven = commands_in(text)
    assert "--optShapes=x:2x16x64" in ten and "--optShapes=x:2x16x64" in eleven
    assert f"--timingCacheFile=timing_cache/{timing_cache_name(FAKE_ENVIRONMENT.key_facts())}" in ten
    assert "0 violation(s)" in (out / outcome.console_file).read_text()


def test_timing_cache_key_follows_gpu_driver_cuda_and_tensorrt_with_fake_tensorrt(tmp_path):
    inputs = write_inputs(tmp_path / "in")
    paths = []
    for environment in (FAKE_ENVIRONMENT, Environment("Other GPU", "9.0", "560.1", "12.6", "10.9.0.34"),
                        Environment(**{**FAKE_ENVIRONMENT.key_facts(), "driver": "551.0"})):
        fake = FakeTensorRTBackend(inspector=fp32_layernorm_kept(), environment_facts=environment)
        BuildEngine(backend=fake).run(inputs, config(tmp_path), mk(tmp_path / environment.gpu_name / environment.driver))
        paths.append(fake.builds[0].options.timing_cache)
        assert paths[-1].parent == tmp_path / "cache" / "timing_cache"
        assert BuildEngine.key_facts(fake) == environment.key_facts()
    assert len(set(paths)) == 3
    off = FakeTensorRTBackend(inspector=fp32_layernorm_kept())
    BuildEngine(backend=off).run(inputs, config(tmp_path, timing_cache=False), mk(tmp_path / "off"))
    assert off.builds[0].options.timing_cache is None


@pytest.mark.parametrize("audit, failed", [("warn", False), ("error", True)])
def test_layernorm_swallowed_in_fp16_is_reported_and_fails_on_request_with_fake_tensorrt(tmp_path, audit, failed):
    inputs = write_inputs(tmp_path / "in")
    fake = FakeTensorRTBackend(inspector=layernorm_swallowed_in_fp16())
    outcome = BuildEngine(backend=fake).run(inputs, config(tmp_path, audit=audit), mk(tmp_path / "out"))
    assert "1 violation(s)" in outcome.summary
    assert (outcome.failed is not None) == failed
    if failed:
        assert "/ln/LayerNormalization" in outcome.failed and "precision_audit.json" in outcome.failed
    row = json.loads((tmp_path / "out" / "precision_audit.json").read_text())["rows"][0]
    assert (row["realised"], row["fused"], row["engine_layer"]) == (
        "fp16", True, "{ForeignNode[/ln/LayerNormalization.../to_fp32/Cast]}")


def test_constraints_mode_reaches_the_backend_on_10x_and_is_refused_on_11x_with_fake_tensorrt(tmp_path):
    inputs = write_inputs(tmp_path / "in")
    ten = FakeTensorRTBackend(inspector=fp32_layernorm_kept())
    BuildEngine(backend=ten).run(inputs, config(tmp_path, precision_mode="constraints"), mk(tmp_path / "ten"))
    assert ten.builds[0].options.precision_mode == "constraints"
    assert "--precisionConstraints=obey" in commands_in((tmp_path / "ten" / "trtexec.txt").read_text())[0]
    eleven = FakeTensorRTBackend(environment_facts=Environment(**{**FAKE_ENVIRONMENT.key_facts(), "tensorrt": "11.4.1"}))
    with pytest.raises(UserError, match="precision_mode=constraints needs TensorRT 10.x.*11.4.1.*strongly_typed"):
        BuildEngine(backend=eleven).run(inputs, config(tmp_path, precision_mode="constraints"), mk(tmp_path / "eleven"))
    assert eleven.builds == []


@pytest.mark.parametrize("changes, message", [
    ({}, r"dynamic inputs \(x \[batch, 16, 64\]\)"),
    ({"profiles": [PROFILE], "on_missing": "later"}, "build.on_missing is 'later'"),
    ({"profiles": [PROFILE], "memory_pool_limits": {"scratch": 64}}, "pool 'scratch'"),
    ({"profiles": [PROFILE], "builder_optimization_level": 9}, "builder_optimization_level is 9"),
])
def test_config_and_profile_errors_come_before_any_build_with_fake_tensorrt(tmp_path, changes, message):
    inputs = write_inputs(tmp_path / "in", batch="batch")
    fake = FakeTensorRTBackend()
    with pytest.raises(UserError, match=message):
        BuildEngine(backend=fake).run(inputs, config(tmp_path, **changes), mk(tmp_path / "out"))
    assert fake.builds == []


@no_tensorrt
def test_without_tensorrt_the_build_is_deferred_with_both_trtexec_commands_and_a_gpu_script(tmp_path):
    inputs = write_inputs(tmp_path / "in")
    outcome = BuildEngine().run(inputs, config(tmp_path), mk(tmp_path / "out"))
    assert outcome.status == "deferred" and outcome.failed is None
    assert outcome.summary.startswith("DEFERRED, no engine built: TensorRT is not available")
    assert "\n" not in outcome.summary and "build/build_on_gpu.py" in outcome.summary
    assert outcome.outputs == {"trtexec": "trtexec.txt", "build_script": "build_on_gpu.py",
                               "parser_support": "parser_support.json"}
    assert set(BuildEngine.produces) <= set(outcome.outputs)
    text = (tmp_path / "out" / "trtexec.txt").read_text()
    assert f"sha256 {artifact_digest(inputs['model'])}" in text and "<- in use" not in text
    ten, eleven = commands_in(text)
    assert ten[:4] == ["trtexec", "--onnx=../in/model.onnx", "--saveEngine=model.engine", "--stronglyTyped"]
    assert eleven[:3] == ten[:3] and "--stronglyTyped" not in eleven and "--fp16" not in eleven
    assert {"--noTF32", "--timingCacheFile=timing.cache", "--exportLayerInfo=layer_info.json"} <= set(ten) & set(eleven)
    again = BuildEngine().run(inputs, config(tmp_path / "elsewhere"), mk(tmp_path / "again"))
    for name in again.outputs.values():  # artifacts: the same bytes for the same inputs and config
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "out" / name).read_bytes()


@no_tensorrt
def test_on_missing_error_fails_with_what_is_missing_and_what_to_install(tmp_path):
    inputs = write_inputs(tmp_path / "in")
    with pytest.raises(StageFailed, match=r"'tensorrt' cannot be imported.*on_missing=error.*pip install tensorrt-cu13"):
        BuildEngine().run(inputs, config(tmp_path, on_missing="error"), mk(tmp_path / "out"))


@no_tensorrt
def test_the_gpu_script_finds_the_run_s_artifacts_by_digest_and_builds_with_on_missing_error(tmp_path):
    run_dir = tmp_path / "run"
    inputs = write_inputs(run_dir / "precision")
    outcome = BuildEngine().run(inputs, config(tmp_path), mk(run_dir / "build"))
    manifest = {"stages": [{"name": "precision", "outputs": {
        kind: {"path": f"precision/{path.name}", "sha256": artifact_digest(path)} for kind, path in inputs.items()}}]}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    script = run_dir / "build" / outcome.outputs["build_script"]
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={"PYTHONPATH": str(__import__("pathlib").Path(__file__).parents[2]),
                                             "TRTPIPE_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"})
    assert done.returncode != 0
    assert "cannot find" not in done.stderr  # it found model and plan through the manifest
    assert "no engine can be built here" in done.stderr and "on_missing=error" in done.stderr
    assert "Traceback" not in done.stderr


def test_key_facts_name_gpu_driver_cuda_and_tensorrt():
    assert set(BuildEngine.key_facts()) == {"gpu_name", "compute_capability", "driver", "cuda", "tensorrt"}
    assert BuildEngine.key_facts(FakeTensorRTBackend()) == FAKE_ENVIRONMENT.key_facts()


@pytest.fixture(scope="module")
def transformer_mixed(tmp_path_factory):
    """The built-in transformer through sanitize, upgrade_opset and precision (transformer_fp16)."""
    from trtpipe.config.locate import conf_dir
    from trtpipe.config.preflight import compose_checked
    from trtpipe.config.store import register_configs
    from trtpipe.data import resolved_data
    from trtpipe.source import resolve_model_source
    from trtpipe.stages import STAGES

    work = tmp_path_factory.mktemp("transformer")
    register_configs()
    cfg = compose_checked(conf_dir(), ["+recipe=transformer_fp16"])
    data = resolved_data(cfg.data, cfg.model.builtin, work)
    artifacts = {"model": resolve_model_source(None, cfg.model.builtin, mk(work / "cache"), work)}
    for name in ("sanitize", "upgrade_opset", "precision"):
        stage = STAGES[name]
        stage_config = OmegaConf.to_container(cfg[name], resolve=True)
        if stage.uses_data:
            stage_config["data"] = data
        outcome = stage().run({kind: artifacts[kind] for kind in stage.consumes}, stage_config, mk(work / name))
        artifacts.update({kind: work / name / file for kind, file in outcome.outputs.items()})
    return artifacts


def inspector_with_a_foreign_node(model_path, around: str) -> dict:
    """One engine layer per node (typed as the ONNX says), except `around`, the FP32 node producing its
    input when that is not a Cast (the residual Add, precision/auto/group_inputs.py), and the Casts next to
    them, which a Myelin ForeignNode swallowed: its I/O are the Casts' FP16 tensors."""
    import onnx

    from trtpipe.graph.names.parser_names import parser_names

    model = onnx.shape_inference.infer_shapes(onnx.load(str(model_path)))
    graph = model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.output, *graph.value_info]}
    text = {1: "Row major linear FP32", 10: "Row major linear FP16 format", 7: "Row major linear Int64 format",
            6: "Row major linear Int32", 9: "Row major linear BOOL"}
    named = parser_names(graph.node)
    producer = {t: n for n, node in named.items() for t in node.output}
    island, pending = {around}, [around]
    while pending:  # back through the FP32 arithmetic that computes the norm's input, up to Casts
        for tensor in named[pending.pop()].input:
            name = producer.get(tensor)
            if name and name not in island and named[name].op_type in ("Add", "Sub", "Mul", "Div"):
                island.add(name)
                pending.append(name)
    swallowed = island | {n for n, node in named.items() if node.op_type == "Cast" and any(
        set(node.output) & set(named[c].input) or set(node.input) & set(named[c].output) for c in island)}

    def tensors(names):
        return [tensor_10x(t, text.get(types.get(t), "Unknown format")) for t in names if t in types]

    layers, foreign = [], None
    for name, node in named.items():
        if name not in swallowed:
            layers.append(layer(name, node.op_type, tensors(node.input), tensors(node.output), [name]))
        elif foreign is None:
            members = [n for n in named if n in swallowed]
            first, last = named[members[0]], named[members[-1]]
            foreign = layer(f"{{ForeignNode[{members[0]}...{members[-1]}]}}", "Myelin", tensors(first.input[:1]),
                            tensors(last.output), members)
            layers.append(foreign)
    return layers_10x(layers)


def test_transformer_audit_finds_the_layernorm_myelin_swallowed_with_fake_tensorrt(tmp_path, transformer_mixed):
    swallowed_ln = "/encoder/layer.0/attention/output/LayerNorm/LayerNormalization"
    fake = FakeTensorRTBackend(inspector=lambda path, plan: inspector_with_a_foreign_node(path, swallowed_ln))
    outcome = BuildEngine(backend=fake).run({"model": transformer_mixed["model"], "plan": transformer_mixed["plan"]},
                                            config(tmp_path), mk(tmp_path / "out"))
    audit = json.loads((tmp_path / "out" / "precision_audit.json").read_text())
    rows = {row["node"]: row for row in audit["rows"]}
    # The norm and the FP32 Adds computing its input (precision/auto/group_inputs.py), all realised FP16.
    assert audit["violations"][-1] == swallowed_ln
    assert [v.rsplit("/", 1)[1] for v in audit["violations"][:-1]] == ["Add", "Add"]
    assert rows[swallowed_ln]["realised"] == "fp16" and rows[swallowed_ln]["fused"]
    assert rows[swallowed_ln]["engine_layer"].startswith("{ForeignNode[")
    others = [row for node, row in rows.items() if node.endswith("LayerNormalization") and node != swallowed_ln]
    assert others and all(row["verdict"] == "ok" and row["realised"] == "fp32" for row in others)
    assert "3 violation(s)" in outcome.summary and outcome.failed is None
