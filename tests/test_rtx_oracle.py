"""The TensorRT-RTX oracle (bench/rtx, issue 23): the real TensorRT-RTX 1.7.1 parser and
builder read trtpipe's precision output of built-in models and build for sm89 without a GPU.

`pytest -m rtx`. Needs the package index once (the pinned wheel is installed into
~/.cache/trtpipe/bench-rtx/0.5.0, or $TRTPIPE_RTX_HOME), namespaces (`unshare -m` as root,
`unshare -Urm` as any other user: bench/rtx/sandbox.py) and gcc. It
FAILS with the reason when one is missing, never skips: an oracle that silently does not
run says nothing. What is faked (stand-in CUDA libraries, a fake /sys/class/drm GPU, in
the child process only) is described in bench/rtx/__init__.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.rtx import check, wheel
from trtpipe.trt.rtx import parser_log, plan_compare

pytestmark = [pytest.mark.rtx, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
RECIPES = ("transformer_fp16", "nafnet_fp16")


def _require_oracle() -> None:
    from bench.rtx import sandbox

    problem = sandbox.unavailable()   # root: unshare -m; any other user: unshare -Urm
    if problem:
        pytest.fail(f"the rtx oracle cannot show its fake GPU: {problem}")
    try:
        wheel.ensure()
    except wheel.WheelUnavailable as exc:
        pytest.fail(f"the pinned TensorRT-RTX wheel cannot be installed: {exc}")


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory):
    """`python -m bench.rtx` on two built-in models, run directories kept."""
    _require_oracle()
    keep = tmp_path_factory.mktemp("rtx")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    done = subprocess.run([sys.executable, "-m", "bench.rtx", "--recipes", *RECIPES, "--keep", str(keep)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    return done, keep


def test_the_real_parser_builds_both_models_with_every_node_typed_as_planned(oracle_run):
    done, keep = oracle_run
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "rtx: 2/2 models built, types as planned", done.stdout
    for recipe in RECIPES:
        row = next(ln for ln in lines if ln.startswith(recipe))
        assert "parsed, built" in row and "node types as planned" in row, row
        planned = json.loads((keep / recipe / "run" / "precision" / "precision_plan.json").read_text())
        log = (keep / recipe / "run" / "rtx" / "build_sm89.log").read_text()
        assert "legacy CPU-only mode" in log  # ahead of time: no GPU was used
        # Every non-Constant plan node was logged by the parser (Constants become initializers).
        parsed = parser_log.read(log).nodes
        missing = [n["name"] for n in planned["nodes"] if n["op_type"] != "Constant" and n["name"] not in parsed]
        assert not missing
        compiled = onnx.load(str(keep / recipe / "run" / "rtx" / "model_ctx_sm89.onnx"))
        assert [n.op_type for n in compiled.graph.node] == ["EPContext"]  # the whole graph on the EP


def test_a_plan_the_parser_did_not_see_is_reported_node_by_node(oracle_run, tmp_path):
    """The comparison can fail: the same real log against a plan with one FP16 MatMul
    turned FP32 and one FP32 node turned FP16 names exactly those two nodes."""
    _, keep = oracle_run
    run = keep / "transformer_fp16" / "run"
    plan = json.loads((run / "precision" / "precision_plan.json").read_text())
    matmul = next(n for n in plan["nodes"] if n["op_type"] == "MatMul" and n["precision"] == "fp16")
    fp32 = next(n for n in plan["nodes"] if n["precision"] == "fp32" and n["op_type"] != "Constant")
    matmul["precision"], fp32["precision"] = "fp32", "fp16"
    tampered = tmp_path / "precision_plan.json"
    tampered.write_text(json.dumps(plan))
    log = parser_log.read((run / "rtx" / "build_sm89.log").read_text())
    result = plan_compare.compare(tampered, run / "precision" / "model.onnx", log)
    assert result.planned - result.as_planned == 2
    named = sorted(d.split(" [")[0] for d in result.disagreements)
    assert named == sorted([matmul["name"], fp32["name"]])
    assert any("parsed HALF, expected FLOAT" in d for d in result.disagreements)


def _conv_integer():
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1, 6, 6])
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.uint8), "w")
    return helper.make_graph([helper.make_node("ConvInteger", ["x", "w"], ["y"], name="ci")], "g", [x], [y], [w])


def _double_output():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [4])
    return helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.DOUBLE, name="ci")],
                             "g", [x], [y])


@pytest.mark.parametrize(("graph", "verdict", "words"), [
    # The real parser's op check refuses ConvInteger; the row names the check and the node.
    (_conv_integer, "refused by the parser", ("checkConvInteger", "ConvInteger")),
    # The EP refuses a DOUBLE graph output before the parser sees a node.
    (_double_output, "refused by the EP", ("Unsupported data type DOUBLE", "y")),
])
def test_a_refused_model_is_reported_with_who_refused_it_and_why(tmp_path, graph, verdict, words):
    _require_oracle()
    run = tmp_path / "run"
    (run / "precision").mkdir(parents=True)
    model = helper.make_model(graph(), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, run / "precision" / "model.onnx")
    op = model.graph.node[0].op_type
    (run / "precision" / "precision_plan.json").write_text(
        json.dumps({"nodes": [{"name": "ci", "op_type": op, "precision": "none"}]}))
    oracle = check.prepare(tmp_path / "oracle")
    result = check.compile_and_compare(op, run, oracle, "sm89", 300)
    assert result.verdict == verdict, result.reason
    assert all(w in result.reason for w in words), result.reason
    assert not result.as_planned


# --- trtpipe's own tensorrt_rtx backend (issue 23, items 3 and 4), through the real command line ---

def _trtpipe(work: Path, run: str, *overrides: str, sandboxed: bool, oracle: dict | None = None):
    """`python -m trtpipe` from `work`; sandboxed: in the fake-GPU namespace with the stand-in
    driver libraries preloaded (the only fakes; trtpipe's backend is the product's, unchanged)."""
    from bench.rtx import sandbox, standins

    env = dict(os.environ, TRTPIPE_CACHE=str(work / "cache"), TRTPIPE_RTX_HOME=str(wheel.home()),
               PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    command = [sys.executable, "-m", "trtpipe", *overrides, f"hydra.run.dir={work / run}"]
    if sandboxed:
        env["LD_PRELOAD"] = standins.preload(oracle["standins"])
        command = sandbox.wrap(command, oracle["fake_drm"])
    return subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def backend_run(tmp_path_factory):
    """transformer_fp16 built by `trtpipe ... build.backend=tensorrt_rtx` in the sandbox."""
    _require_oracle()
    work = tmp_path_factory.mktemp("rtx-backend")
    oracle = check.prepare(work / "oracle")
    done = _trtpipe(work, "run", "+recipe=transformer_fp16", "stages=[sanitize,upgrade_opset,precision,build]",
                    "build.backend=tensorrt_rtx", "build.rtx.target_sm=sm89", sandboxed=True, oracle=oracle)
    return done, work / "run"


def test_trtpipe_builds_a_real_epcontext_engine_for_sm89_and_audits_the_parser_s_types(backend_run):
    done, run = backend_run
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    build = next(s for s in json.loads((run / "manifest.json").read_text())["stages"] if s["name"] == "build")
    assert build["status"] == "ran" and build["outputs"]["engine"]["path"] == "build/model_ctx.onnx"
    engine = onnx.load(str(run / "build" / "model_ctx.onnx"))
    assert [n.op_type for n in engine.graph.node] == ["EPContext"]  # the whole graph, the engine embedded
    attributes = {a.name: a for a in engine.graph.node[0].attribute}
    assert attributes["embed_mode"].i == 1 and len(attributes["ep_cache_context"].s) > 100_000
    log = (run / "build" / "build.log").read_text()
    assert "legacy CPU-only mode" in log and "TensorRT-RTX 1.7.1 (EP 0.5.0) for sm89" in done.stdout + done.stderr
    audit = json.loads((run / "build" / "precision_audit.json").read_text())
    plan = json.loads((run / "precision" / "precision_plan.json").read_text())
    fp32 = [n["name"] for n in plan["nodes"] if n["precision"] == "fp32"]
    assert [row["node"] for row in audit["rows"]] == [n["name"] for n in plan["nodes"]] and len(fp32) >= 10
    assert audit["environment"] == {"backend": "tensorrt_rtx", "ep": "0.5.0", "tensorrt_rtx": "1.7.1",
                                    "target_sm": "sm89", "device_visible": True}
    parsed = parser_log.read(log).nodes
    for row in audit["rows"]:  # the parser's own types, as logged, for every input and output
        if row["verdict"] == "initializer":   # a Constant: no node for the parser
            continue
        assert row["verdict"] == "ok", row
        assert row["inputs"] == [list(t) for t in parsed[row["node"]].inputs] and row["outputs"]
        if row["planned"] == "fp32":
            assert {t for _, t in row["outputs"]} == {"FLOAT"}
    assert audit["violations"] == [] and not any(audit["findings"].values())
    assert audit["totals"]["ok"] + audit["totals"].get("initializer", 0) == len(plan["nodes"])


def test_the_audit_flags_a_node_the_parser_typed_other_than_the_plan(backend_run):
    """The same real log against a plan that claims an FP16 MatMul is FP32: that node is a violation."""
    from trtpipe.trt.rtx.audit import parser_audit

    _, run = backend_run
    plan = json.loads((run / "precision" / "precision_plan.json").read_text())
    matmul = next(n for n in plan["nodes"] if n["op_type"] == "MatMul" and n["precision"] == "fp16")
    matmul["precision"] = "fp32"
    model = onnx.load(str(run / "precision" / "model.onnx"), load_external_data=False)
    audit = parser_audit(plan, model, parser_log.read((run / "build" / "build.log").read_text()), {})
    assert audit["violations"] == [matmul["name"]]
    row = next(r for r in audit["rows"] if r["node"] == matmul["name"])
    assert "parsed HALF, expected FLOAT" in row["evidence"] and {t for _, t in row["outputs"]} == {"HALF"}


def test_without_the_sandbox_the_installed_ep_does_not_load_and_the_build_is_deferred_in_one_line(tmp_path):
    """The real EP on this machine as it is (no NVIDIA driver, no GPU): deferred, with the loader's reason;
    then the deferred run's build/build_on_gpu.py, run where the EP sees a device (the sandbox), finishes it."""
    from bench.rtx import sandbox, standins

    _require_oracle()
    done = _trtpipe(tmp_path, "run", "+recipe=transformer_fp16", "stages=[sanitize,upgrade_opset,precision,build]",
                    "build.backend=tensorrt_rtx", sandboxed=False)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(ln for ln in (done.stdout + done.stderr).splitlines() if "DEFERRED" in ln)
    assert "no TensorRT-RTX engine built: the TensorRT-RTX execution provider does not load here" in line
    assert ".so" in line and "To finish on a machine with an RTX GPU" in line and "libcudart.so.12" in line
    assert not (tmp_path / "run" / "build" / "model_ctx.onnx").exists()
    oracle = check.prepare(tmp_path / "oracle")
    env = dict(os.environ, TRTPIPE_RTX_HOME=str(wheel.home()), LD_PRELOAD=standins.preload(oracle["standins"]),
               PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    script = [sys.executable, str(tmp_path / "run" / "build" / "build_on_gpu.py")]
    finished = subprocess.run(sandbox.wrap(script, oracle["fake_drm"]), env=env, capture_output=True, text=True,
                              timeout=600)
    assert finished.returncode == 0, finished.stdout + finished.stderr[-2000:]
    assert "build: ran  TensorRT-RTX 1.7.1 (EP 0.5.0) for sm89: EPContext model" in finished.stdout
    built = tmp_path / "run" / "build" / "gpu_build"
    assert [n.op_type for n in onnx.load(str(built / "model_ctx.onnx")).graph.node] == ["EPContext"]
    assert json.loads((built / "precision_audit.json").read_text())["totals"]["ok"] >= 10


def test_validate_hands_the_epcontext_engine_to_the_ep_which_needs_a_real_driver_to_run_it(tmp_path):
    """validate's EPContext runner, as far as it can go here: in the sandbox it registers the EP,
    picks its device and ONNX Runtime asks the EP for a provider, which calls the (stand-in) driver;
    the stand-in answers "no device", so the run fails (exit 1) in one line naming that, no
    traceback. No engine runs: that needs a real RTX GPU."""
    _require_oracle()
    oracle = check.prepare(tmp_path / "oracle")
    done = _trtpipe(tmp_path, "run", "+recipe=transformer_fp16", "build.backend=tensorrt_rtx",
                    sandboxed=True, oracle=oracle)
    stages = {s["name"]: s for s in json.loads((tmp_path / "run" / "manifest.json").read_text())["stages"]}
    assert done.returncode == 1 and stages["build"]["status"] == "ran", done.stdout + done.stderr[-2000:]
    assert stages["validate"]["status"] == "failed"
    assert stages["validate"]["error"].startswith("validate: the TensorRT-RTX EP listed a device but could not run "
                                                  "the EPContext engine model_ctx.onnx")
    assert "stand-in CUDA driver (bench/rtx): no device" in stages["validate"]["error"]
    assert "traceback" not in done.stdout + done.stderr


def test_wild_models_through_the_alias_refusal_predicted_and_profiles_passed(tmp_path):
    """`python -m bench.rtx_check` (the issue's name) on two wild models: ddddocr_int8 is refused
    by the real parser on an integer op trtpipe's op check refused first (it counts), and
    oww_melspectrogram builds only because trtpipe's profile reaches the EP (without it the EP
    assumes a fully dynamic profile whose kOPT values make a Conv output negative)."""
    _require_oracle()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    done = subprocess.run([sys.executable, "-m", "bench.rtx_check", "--models", "ddddocr_int8", "oww_melspectrogram",
                           "--keep", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "rtx: 2/2 models built, types as planned", done.stdout
    int8 = next(ln for ln in lines if ln.startswith("ddddocr_int8"))
    assert "refused by the parser" in int8 and "trtpipe's op check refused it first" in int8, int8
    mel = next(ln for ln in lines if ln.startswith("oww_melspectrogram"))
    assert "parsed, built" in mel and "node types as planned" in mel, mel
    log = (tmp_path / "oww_melspectrogram" / "run" / "rtx" / "build_sm89.log").read_text()
    assert "No explicit optimization profile" not in log


def test_ops_mode_gives_per_type_verdicts_and_a_function_expansion_is_no_build():
    """`python -m bench.rtx --ops Range Abs`: the real parser refuses FP16 Range (importRange takes
    int32, int64 and float only); ONNX Runtime then inlines Range's ONNX function and the EP builds
    the expansion, which must not count as Range built. Abs builds in every type."""
    _require_oracle()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    done = subprocess.run([sys.executable, "-m", "bench.rtx", "--ops", "Range", "Abs"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    rows = {ln.split(":")[0]: ln for ln in done.stdout.splitlines() if ln.startswith(("Range:", "Abs:"))}
    assert rows["Range"].startswith("Range: FP32 built, FP16 refused by the parser (the EP then built ONNX Runtime's "
                                    "expansion"), rows["Range"]
    assert "importRange" in rows["Range"] or "ModelImporter" in rows["Range"]
    assert rows["Abs"] == "Abs: FP32 built, FP16 built, BF16 built, INT32 built, INT64 built", rows["Abs"]


@pytest.mark.parametrize(("op", "read_y", "name_y", "verdict"), [
    ("LSTM", False, False, "parsed, refused by the builder"),   # Y omitted: graphScope.cpp:463
    ("LSTM", False, True, "parsed, refused by the builder"),    # Y named, unread: graphScope.cpp:471
    ("GRU", False, False, "parsed, refused by the builder"),
    ("LSTM", True, False, "built"),
])
def test_the_builder_refuses_a_recurrent_node_in_an_if_with_y_unread_as_trtpipe_predicts(tmp_path, op, read_y,
                                                                                       name_y, verdict):
    """The measurement behind trtpipe/trt/parser/builder_limits.py, on models built here
    (tests/trt/recurrent_models.py): the real builder stops on the limit's signature, the
    refusal is attributed to the op, and reading Y builds."""
    from tests.trt.recurrent_models import recurrent_model
    from trtpipe.trt.parser import builder_limits

    _require_oracle()
    run = tmp_path / "run"
    (run / "precision").mkdir(parents=True)
    onnx.save(recurrent_model(op, read_y=read_y, name_y=name_y), run / "precision" / "model.onnx")
    (run / "precision" / "precision_plan.json").write_text(
        json.dumps({"nodes": [{"name": "if", "op_type": "If", "precision": "none"}]}))
    result = check.compile_and_compare(op, run, check.prepare(tmp_path / "oracle"), "sm89", 300)
    assert result.verdict == verdict, result.reason
    if verdict != "built":
        assert builder_limits.RECURRENT_Y_UNREAD_IN_IF.signature in result.reason, result.reason
        assert result.refused_op == op


def test_trtpipe_s_own_rtx_build_names_the_builder_not_a_parser_error_of_an_if_body(tmp_path):
    """Silero VAD (bench/wild) with build.unsupported=warn past the op check's builder limit, built by
    trtpipe's tensorrt_rtx backend in the sandbox: the stage says the builder refused it, with the
    builder's assertion, not the EP's failed standalone parse of an If body ("Invalid Node ... LSTM")."""
    from bench.wild.wild_models import BY_NAME, fetch

    _require_oracle()
    model = BY_NAME["silero_vad"]
    path = fetch(model.name)
    done = _trtpipe(tmp_path, "run", f"model.path={path}", "stages=[sanitize,upgrade_opset,precision,build]",
                    *model.overrides, "build.unsupported=warn", "build.backend=tensorrt_rtx",
                    "build.rtx.target_sm=sm89", sandboxed=True, oracle=check.prepare(tmp_path / "oracle"))
    assert done.returncode != 0, done.stdout + done.stderr[-3000:]
    build = next(s for s in json.loads((tmp_path / "run" / "manifest.json").read_text())["stages"]
                 if s["name"] == "build")
    assert build["status"] == "failed"
    assert "parsed, refused by the builder: [graphScope.cpp::analyze::471]" in build["error"], build["error"]
    assert "Invalid Node" not in build["error"]
