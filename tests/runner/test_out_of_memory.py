"""Memory running out is the machine's limit: exit 2 with one line that says so, wherever it
happens, and never a silently different output under the same key (issue 22, item 11, and the
`memory_limit` fuzz mutation, which found the two defects below under `ulimit -v`)."""

from __future__ import annotations

import errno

import pytest

from tests.external_model import DATA_OVERRIDE, weight_bytes, write_model
from trtpipe import api
from trtpipe.errors import OutOfMemory, is_out_of_memory
from trtpipe.numerics import ort_logging

ORT_THREADS = ("/onnxruntime_src/onnxruntime/core/platform/posix/env.cc:327 PosixThread pthread_create failed, "
               "error code: 12 error msg: Cannot allocate memory")
UNMAPPED = ("Original error was: libscipy_openblas64_.so: failed to map segment from shared object")


@pytest.mark.parametrize("error", [MemoryError(), OSError(errno.ENOMEM, "Cannot allocate memory"),
                                   RuntimeError(ORT_THREADS), ImportError(f"IMPORTANT: PLEASE READ\n{UNMAPPED}"),
                                   RuntimeError("std::bad_alloc")])
def test_the_words_of_memory_running_out(error):
    assert is_out_of_memory(error)


@pytest.mark.parametrize("error", [ValueError("shape mismatch"), OSError(errno.ENOSPC, "No space left on device"),
                                   ImportError("No module named 'tensorrt'")])
def test_other_failures_are_not_memory(error):
    assert not is_out_of_memory(error)


def test_the_line_names_what_ran_out_not_the_advice_page():
    line = str(OutOfMemory("starting the run", ImportError(f"IMPORTANT: PLEASE READ THIS\nadvice\n{UNMAPPED}")))
    assert "failed to map segment" in line and "PLEASE READ" not in line and "\n" not in line


def test_a_fold_out_of_memory_is_not_silently_undone(tmp_path, monkeypatch):
    """Before: sanitize's constant folding raised, the pass was 'undone' and the unfolded model was
    cached under the key a machine with memory fills with the folded one."""
    def no_threads(*args, **kwargs):
        raise RuntimeError(ORT_THREADS)

    monkeypatch.setattr(ort_logging, "cpu_session", no_threads)
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    # x + (c1 * c2): one foldable constant product
    c1, c2 = (numpy_helper.from_array(np.full((4,), v, np.float32), n) for v, n in ((2.0, "c1"), (3.0, "c2")))
    graph = helper.make_graph([helper.make_node("Mul", ["c1", "c2"], ["c"], name="fold_me"),
                               helper.make_node("Add", ["x", "c"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [c1, c2])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    with pytest.raises(api.PipelineFailed) as raised:
        api.run(["stages=[sanitize]", f"model.path={path}", "+data.inputs.x={low:0,high:1,dtype:float32}",
                 f"cache.dir={tmp_path / 'cache'}"], run_dir=tmp_path / "run", start_dir=tmp_path)
    assert raised.value.result.exit_code == 2
    assert "out of memory while sanitize's constant folding" in str(raised.value)
    assert not list((tmp_path / "cache" / "entries").glob("sanitize/*/model.onnx")), "nothing cached"


def test_a_stage_out_of_memory_is_exit_2_not_a_defect(tmp_path, monkeypatch):
    from trtpipe.stages.precision import PlanPrecision

    def exhausted(self, inputs, config, out_dir):
        raise MemoryError()

    monkeypatch.setattr(PlanPrecision, "run", exhausted)
    model = write_model(tmp_path / "m", data=weight_bytes(1), seed=1)
    with pytest.raises(api.PipelineFailed) as raised:
        api.run(["stages=[sanitize,precision]", f"model.path={model}", DATA_OVERRIDE,
                 f"cache.dir={tmp_path / 'cache'}"], run_dir=tmp_path / "run", start_dir=tmp_path)
    assert raised.value.result.exit_code == 2, "the machine's limit, not a trtpipe defect (exit 1)"
    assert "out of memory while running stage precision" in str(raised.value)
    assert "ulimit -v" in str(raised.value)
