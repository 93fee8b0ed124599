"""`-inf` constants from the command line (issue 30 item 3): a DistilBERT-style encoder whose attention mask is
`masked_fill(mask, -inf)`, exported as `Where(mask, -inf, scores)` before the Softmax, keeps its 6 Where nodes in
FP16 with no Casts around them (before: FP32, 12 Casts, reason "|value| inf > 65504"), the -inf stored as an FP16
-inf, and validation passes on padded inputs (the emulator reads the -inf)."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from tests.cli_helpers import run_trtpipe
from tests.precision.inf_mask_models import LAYERS, inf_mask_encoder


def test_minus_inf_mask_leaves_its_where_nodes_fp16(tmp_path):
    model, feeds = inf_mask_encoder()
    onnx.save(model, str(tmp_path / "distilbert.onnx"))
    np.savez(tmp_path / "distilbert.npz", **feeds)
    run = run_trtpipe(tmp_path, "+recipe=transformer_fp16", f"model.path={tmp_path / 'distilbert.onnx'}",
                      f"data.path={tmp_path / 'distilbert.npz'}")
    assert run.code == 0, run.stdout + run.stderr
    stages = {s["name"]: s for s in run.manifest["stages"]}
    plan = json.loads((run.run_dir / stages["precision"]["outputs"]["plan"]["path"]).read_text())
    wheres = [n for n in plan["nodes"] if n["op_type"] == "Where"]
    assert len(wheres) == LAYERS and all(n["precision"] == "fp16" for n in wheres), wheres
    assert not [n for n in plan["nodes"] if "inf >" in n["reason"]]
    assert "constant" not in plan["totals"]["casts_by_reason"]

    mixed = onnx.load(str(run.run_dir / stages["precision"]["outputs"]["model"]["path"]))
    casts = [n for n in mixed.graph.node if n.op_type == "Cast"]
    where_tensors = {t for n in mixed.graph.node if n.op_type == "Where" for t in (*n.input, *n.output)}
    assert not [c.name for c in casts if {*c.input, *c.output} & where_tensors]
    values = {t.name: t for t in mixed.graph.initializer}
    values.update({n.output[0]: n.attribute[0].t for n in mixed.graph.node if n.op_type == "Constant"})
    fills = [values[n.input[1]] for n in mixed.graph.node if n.op_type == "Where"]
    assert all(t.data_type == TensorProto.FLOAT16 and numpy_helper.to_array(t) == -np.inf for t in fills)

    report = json.loads((run.run_dir / stages["validate"]["outputs"]["report"]["path"]).read_text())
    emulated = next(c for c in report["candidates"] if c["name"] == "emulated")
    assert report["passed"] and emulated["outputs"]["last_hidden_state"]["nonfinite"] == 0
