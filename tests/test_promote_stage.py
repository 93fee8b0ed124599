"""The promote_outputs stage with nothing to promote passes the model through intact."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from trtpipe.onnxmodel.onnx_io import load_model, save_model
from trtpipe.stages.promote_outputs import PromoteOutputs


def test_empty_selection_copies_the_model_and_its_external_data(tmp_path):
    w = numpy_helper.from_array(np.full((64, 64), 3.0, np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    source = tmp_path / "in" / "model.onnx"
    source.parent.mkdir()
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), source,
               external_threshold_bytes=0)
    out = tmp_path / "out"
    out.mkdir()
    config = {"tensors": [], "nodes": [], "match": "exact", "as_type": "fp32", "warn_above": 16}
    outcome = PromoteOutputs().run({"model": source}, config, out)
    assert outcome.summary == "nothing to promote"
    assert numpy_helper.to_array(load_model(out / "model.onnx").graph.initializer[0]).max() == 3.0


def test_a_promoted_cast_precision_inserted_is_compared_with_the_tensor_it_casts(tmp_path):
    """A regex like '.*MatMul.*' also matches precision's `t/cast_to_fp32`, a tensor only the
    candidate computes: validate compares it with the reference's `t` (a Cast changes the type,
    not the value). Before: validate ended with KeyError, exit 1 ("internal error")."""
    import json

    from trtpipe import api

    result = api.run(["+recipe=transformer_fp16", "stages=[sanitize,upgrade_opset,precision,promote_outputs,validate]",
                      "promote_outputs.match=regex", "promote_outputs.tensors=['.*MatMul.*']",
                      f"cache.dir={tmp_path / 'cache'}"], run_dir=tmp_path / "run", start_dir=tmp_path)
    assert result.ok
    validation = json.loads((tmp_path / "run" / "validate" / "validation.json").read_text())
    compared = validation["candidates"][0]["outputs"]
    casts = [name for name in compared if name.endswith("/cast_to_fp32")]
    assert casts and all(compared[name] is not None for name in casts)
