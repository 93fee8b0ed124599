"""Bad input, one row each: the exit code, one message naming the problem and the fix,
no traceback, and nothing half-written anywhere."""

from __future__ import annotations

import resource
import signal
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import cache_entries, run_trtpipe


def custom_domain_model(path: Path) -> None:
    node = helper.make_node("Foo", ["x"], ["y"], domain="com.acme", name="/acme/Foo")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17),
                                                                     helper.make_opsetid("com.acme", 1)]), str(path))


def external_data_model(path: Path) -> None:
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    (path.parent / "weights.bin").unlink()


def dynamic_model(path: Path) -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="/relu")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    onnx.save(helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)]), str(path))


SETUP = {
    "dynamic.onnx": dynamic_model,
    "empty.onnx": lambda p: p.write_bytes(b""),
    "truncated.onnx": lambda p: p.write_bytes(b"\x08\x07\x12\x05trtpi\x3a\xff\xff\xff"),
    "notes.onnx": lambda p: p.write_text("these are my notes, not a model\n"),
    "custom.onnx": custom_domain_model,
    "external.onnx": external_data_model,
}

RULE = "+precision.rules.{name}={{match:{match},pattern:'{pattern}',precision:{precision}}}"

CASES = [
    ("missing file", ["model.path=/no/such.onnx"], 2, "does not exist"),
    ("empty file", ["model.path=empty.onnx"], 2, "empty"),
    ("truncated protobuf", ["model.path=truncated.onnx"], 2, "truncated.onnx"),
    ("not an ONNX file", ["model.path=notes.onnx"], 2, "notes.onnx"),
    ("external data file missing", ["model.path=external.onnx"], 2, "weights.bin"),
    ("unknown op domain", ["model.path=custom.onnx"], 2, "com.acme:Foo"),
    ("dynamic shapes with no profile", ["model.path=dynamic.onnx", "build.require_profiles=true",
                                        "+data.inputs.x={low:-1,high:1,dtype:float32,shape:[2,4]}"],
     2, "build.profiles is empty"),
    ("sample shape outside the profile", ["model.path=dynamic.onnx",
                                          "+data.inputs.x={low:-1,high:1,dtype:float32,shape:[2,4]}",
                                          "build.profiles=[{x:{min:[1,4],opt:[1,4],max:[1,4]}}]"],
     2, "dimension 0 is 2, outside build.profiles[0].x's range [1, 1]"),
    ("dynamic shapes with no sample shape", ["model.path=dynamic.onnx"], 2, "data.inputs.x.shape"),
    ("a new map entry without +", ["data.inputs.x={low:0}"], 2, "+data.inputs.x"),
    ("invalid regex", ["+recipe=transformer_fp16",
                       RULE.format(name="bad", match="regex", pattern="/encoder/(", precision="fp32")],
     2, "precision.rules.bad.pattern"),
    ("rule matching nothing", ["+recipe=transformer_fp16",
                               RULE.format(name="typo", match="exact", pattern="/encoder/MatMull", precision="fp32")],
     2, "precision rule 'typo'"),
    ("conflicting rules", ["+recipe=transformer_fp16",
                           RULE.format(name="a", match="op_type", pattern="Softmax", precision="fp32"),
                           RULE.format(name="b", match="regex", pattern=".*Softmax", precision="fp16")],
     2, "precision rule 'a' has no effect"),
    ("typo in a config key", ["+recipe=transformer_fp16", "sanitize.fold_constans=false"], 2, "fold_constants"),
    ("wrong value type", ["upgrade_opset.target=seventeen"], 2, "upgrade_opset.target"),
    ("recipe that does not exist", ["+recipe=transformer_fp61"], 2, "no recipe 'transformer_fp61' (the closest is 'transformer_fp16')"),
    ("unwritable cache directory", ["cache.dir=blocker/cache"], 2, "not writable"),
]


@pytest.mark.parametrize("label, overrides, code, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input(tmp_path, label, overrides, code, expected):
    for name, make in SETUP.items():
        make(tmp_path / name)
    (tmp_path / "blocker").write_text("a file where the cache directory should be")
    run = run_trtpipe(tmp_path, *overrides)
    assert_clean_failure(run, tmp_path, code, expected)


@pytest.mark.parametrize("limit", [30_000, 20_000])  # the first large write: a stage's model, the built-in model
def test_full_disk(tmp_path, limit):
    """Simulated with a file-size limit: the first large write fails (EFBIG). At 20 kB that is the
    built-in model written into the cache (it was exit 1, "internal error")."""

    def small_files_only():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    run = run_trtpipe(tmp_path, "+recipe=mixed_precision", preexec_fn=small_files_only)
    assert_clean_failure(run, tmp_path, 2, "File too large")


def assert_clean_failure(run, workdir: Path, code: int, expected: str) -> None:
    output = run.stdout + run.stderr
    assert run.code == code, output
    problems = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(problems) == 1 and expected in problems[0], run.stderr
    assert "Fix:" in problems[0]
    assert "Traceback" not in output
    cache = workdir / "cache"
    assert not list((cache / "tmp").glob("*")) if (cache / "tmp").exists() else True
    for entry in cache_entries(cache):  # every entry left is complete and verifiable
        assert (entry / "entry.json").is_file()
    if run.run_dir.exists():  # stopped inside a stage: the manifest records it
        import json

        manifest = json.loads((run.run_dir / "manifest.json").read_text())
        assert manifest["status"] == "failed"
        failed = [s for s in manifest["stages"] if s["status"] == "failed"]
        assert len(failed) == 1
        # A failed stage publishes nothing (a validation verdict would, by design: not here).
        assert failed[0]["key"] is None and not failed[0]["outputs"]
