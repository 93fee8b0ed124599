"""`+recipe=fp32` on models stored in FP16 (issue 30, item 4): the written model computes in FP32,
the stage line says what was promoted, graph I/O follows `precision.keep_io_types`, and a model
the baseline cannot compute in FP32 is refused in one line (exit 2)."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe
from trtpipe.models import BUILTIN_INPUT_SPECS, builtin_model
from trtpipe.onnxmodel.subgraphs import all_graphs
from trtpipe.precision.materialize.materialize import authored_element_types, materialize, name_unnamed_nodes

LOW = (TensorProto.FLOAT16, TensorProto.BFLOAT16)


def stored_in_fp16(name: str, *, keep_io_types: bool) -> onnx.ModelProto:
    """The built-in model with every node but the author's Casts computing in FP16, its weights stored
    in FP16 (as an FP16 export is); FP16 graph inputs/outputs where `keep_io_types` is false."""
    model = builtin_model(name)
    name_unnamed_nodes(model)
    plan = {n.name: "keep" if n.op_type == "Cast" else "fp16" for g in all_graphs(model.graph) for n in g.node}
    stored, _ = materialize(model, plan, keep_io_types=keep_io_types)
    return stored


def data_overrides(name: str) -> list[str]:
    return [f"++data.inputs.{k}={{low:{v['low']},high:{v['high']},dtype:{v['dtype']}}}"
            for k, v in BUILTIN_INPUT_SPECS[name].items()]


def low_tensors_of_compute(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(node, tensor) for every FP16/BF16 tensor a node other than a Cast reads or writes."""
    types = authored_element_types(model)
    return [(node.name, t) for graph in all_graphs(model.graph) for node in graph.node if node.op_type != "Cast"
            for t in [*node.input, *node.output] if t and types.get(t) in LOW]


def precision_line(run) -> str:
    return next(line for line in run.stdout.splitlines() if line.strip().startswith("precision ") and " ran " in line)


def written(run) -> onnx.ModelProto:
    return onnx.load(str(run.run_dir / "precision" / "model.onnx"))


def io_types(model: onnx.ModelProto) -> dict[str, int]:
    return {v.name: v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]}


def check_baseline(run, source: onnx.ModelProto) -> onnx.ModelProto:
    """Exit 0, validation passed, FP32 compute and weights, and the stage line saying so."""
    assert run.code == 0, run.stdout + run.stderr
    assert json.loads((run.run_dir / "validate" / "validation.json").read_text())["passed"]
    model = written(run)
    assert low_tensors_of_compute(model) == []
    assert [t.name for t in model.graph.initializer if t.data_type in LOW] == []
    assert any(t.data_type in LOW for t in source.graph.initializer)
    line = precision_line(run)
    promoted = int(re.search(r"FP32 baseline: promoted (\d+) authored FP16 node\(s\)", line).group(1))
    assert promoted > 0 and "0.0% FLOPs low precision" in line, line
    plan = json.loads((run.run_dir / "precision" / "precision_plan.json").read_text())
    assert plan["baseline"]["promoted"] == promoted
    assert plan["totals"]["low_precision_flop_share"] == 0.0
    return model


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fp32_baseline")


@pytest.fixture(scope="module")
def transformer16(workdir):
    source = stored_in_fp16("transformer", keep_io_types=True)
    onnx.save(source, str(workdir / "transformer16.onnx"))
    return source


def test_fp16_weights_and_compute_are_promoted(workdir, transformer16):
    source = transformer16
    run = run_trtpipe(workdir, "+recipe=fp32", "model.path=transformer16.onnx", *data_overrides("transformer"),
                      run_name="transformer16")
    model = check_baseline(run, source)
    # The FP16 export's own boundary Casts (mask and outputs) now cast to FP32: no FP16 anywhere.
    types = authored_element_types(model)
    assert not any(t in LOW for t in types.values())
    plan = json.loads((run.run_dir / "precision" / "precision_plan.json").read_text())
    said = [n for n in plan["nodes"] if "authored FP16 compute promoted to FP32" in n["reason"]]
    assert len(said) == plan["baseline"]["promoted"] and {n["precision"] for n in said} == {"fp32"}


@pytest.mark.parametrize("keep_io_types", [True, False])
def test_fp16_graph_io_follows_keep_io_types(workdir, keep_io_types):
    source = stored_in_fp16("nafnet", keep_io_types=False)
    path = workdir / "nafnet16.onnx"
    onnx.save(source, str(path))
    assert set(io_types(source).values()) == {TensorProto.FLOAT16}
    run = run_trtpipe(workdir, "+recipe=fp32", f"model.path={path}", f"precision.keep_io_types={keep_io_types}",
                      run_name=f"nafnet16_{keep_io_types}")
    model = check_baseline(run, source)
    expected = TensorProto.FLOAT16 if keep_io_types else TensorProto.FLOAT
    assert set(io_types(model).values()) == {expected}
    readers = [n for n in model.graph.node if "image" in n.input]
    if keep_io_types:  # the FP16 input is read once, by a Cast to FP32; the output written by a Cast to FP16
        assert [(n.op_type, n.attribute[0].i) for n in readers] == [("Cast", TensorProto.FLOAT)]
        producer = next(n for n in model.graph.node if "restored" in n.output)
        assert (producer.op_type, producer.attribute[0].i) == ("Cast", TensorProto.FLOAT16)
    else:
        assert readers and all(n.op_type != "Cast" for n in readers)


def test_authored_cast_islands_are_promoted(workdir):
    """The built-in hand-tuned model (FP16 blocks, FP32 norms between the author's Casts)."""
    source = builtin_model("mixed_precision")
    onnx.save(source, str(workdir / "mixed.onnx"))
    run = run_trtpipe(workdir, "+recipe=fp32", "model.path=mixed.onnx", run_name="mixed")
    model = check_baseline(run, source)
    assert [n.name for n in model.graph.node if n.op_type == "Cast"] == []  # every author's Cast now a no-op
    plan = json.loads((run.run_dir / "precision" / "precision_plan.json").read_text())
    assert plan["baseline"]["casts_promoted"] == 8 and plan["totals"]["nodes"].get("keep", 0) == 0
    assert {c["reason"].split(":")[0] for c in plan["redundant_casts"]["casts"]} == {"no-op"}


def loop_carrying_fp16() -> onnx.ModelProto:
    """A Loop whose carried state is FP16: its declared type holds across iterations."""
    one = numpy_helper.from_array(np.array([1.0], np.float16), "one")
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "one"], ["v_out"], name="add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT16, [4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT16, [4])],
        [one])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "x"], ["y"], name="loop", body=body)],
        "carried", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4])],
        [numpy_helper.from_array(np.array(3, np.int64), "trips")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_loop_carrying_fp16_state_is_refused_in_one_line(workdir):
    onnx.save(loop_carrying_fp16(), str(workdir / "loop16.onnx"))
    run = run_trtpipe(workdir, "+recipe=fp32", "model.path=loop16.onnx", run_name="loop16")
    assert run.code == 2, run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "baseline" in errors[0] and "'loop'" in errors[0] and "Loop/Scan" in errors[0], errors
    assert run.statuses()["precision"] == "failed"


def test_a_user_rule_for_fp16_on_the_baseline_is_the_users_choice(workdir, transformer16):
    """FP32 default with FP16 rules is a plan like any other: the baseline check leaves the ruled nodes."""
    query = "/encoder/layer.0/attention/self/query/MatMul"
    run = run_trtpipe(workdir, "+recipe=fp32", "model.path=transformer16.onnx", *data_overrides("transformer"),
                      f"+precision.rules.q={{match:exact,pattern:'{query}',precision:fp16}}", run_name="ruled")
    assert run.code == 0, run.stdout + run.stderr
    assert {node for node, _ in low_tensors_of_compute(written(run))} == {query}
