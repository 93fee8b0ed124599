"""Integer inputs take the ranges the model states, or fail once naming all of them (issue 30, item 5).

Before: each integer input without `data.inputs.<name>.low/high` was an error of its own, raised
inside the precision stage after sanitize and upgrade_opset ran, and its Fix ([0, 2)) gave a
"passing" verdict on ids {0, 1}. Through the real command line on a small BERT-like encoder:
token ids and token types index embedding tables, the attention mask is cast and taken from 1."""

from __future__ import annotations


import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe
from tests.models.attention_mask import mask_bias_weights, masked_add_nodes
from tests.test_cli_dynamic_inputs import pasted_fixes

STAGES = "stages=[sanitize,upgrade_opset,precision,validate]"
VOCAB, TYPES, WIDTH, SEQ = 50, 2, 8, 6


def encoder_model() -> onnx.ModelProto:
    """input_ids/token_type_ids -> Gather on tables; attention_mask -> Unsqueeze, Cast, 1 - m, * -1e4."""
    rng = np.random.RandomState(0)
    ints = [helper.make_tensor_value_info(name, TensorProto.INT64, [1, SEQ])
            for name in ("input_ids", "token_type_ids", "attention_mask")]
    weights = [numpy_helper.from_array(rng.randn(VOCAB, WIDTH).astype(np.float32), "word_embeddings"),
               numpy_helper.from_array(rng.randn(TYPES, WIDTH).astype(np.float32), "type_embeddings"),
               *mask_bias_weights()]
    nodes = [
        helper.make_node("Gather", ["word_embeddings", "input_ids"], ["words"], name="embed_words"),
        helper.make_node("Gather", ["type_embeddings", "token_type_ids"], ["types"], name="embed_types"),
        helper.make_node("Add", ["words", "types"], ["hidden"], name="add_embeddings"),
        *masked_add_nodes("attention_mask", "hidden", "y"),
    ]
    graph = helper.make_graph(nodes, "encoder", ints, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                    [1, SEQ, WIDTH])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def unread_integer_model(dynamic: bool = False) -> onnx.ModelProto:
    """Two integer inputs the model says nothing about: each cast to float and scaled."""
    dims = ["batch", 4] if dynamic else [1, 4]
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, dims) for name in ("a", "b")]
    nodes = [helper.make_node("Cast", ["a"], ["af"], name="cast_a", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["b"], ["bf"], name="cast_b", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["af", "bf"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "unread", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def data_specs(run) -> dict:
    precision = next(stage for stage in run.manifest["stages"] if stage["name"] == "precision")
    return precision["material"]["config"]["data"]["inputs"]


def test_an_encoder_without_data_runs_on_ranges_read_from_the_model(tmp_path):
    onnx.save(encoder_model(), str(tmp_path / "encoder.onnx"))
    run = run_trtpipe(tmp_path, "model.path=encoder.onnx", STAGES)
    assert run.code == 0, run.stdout + run.stderr
    decisions = [line for line in run.stdout.splitlines() if line.strip().startswith("data ")]
    assert len(decisions) == 3, run.stdout  # printed once each, before any stage
    assert run.stdout.index("input 'input_ids': integers in [0, 50)") < run.stdout.index("sanitize        running")
    assert "input 'token_type_ids': integers in [0, 2)" in run.stdout
    assert "input 'attention_mask': integers in [0, 2), read from the model: a mask" in run.stdout
    specs = data_specs(run)  # recorded with the reason, in the key material of the stages using them
    assert (specs["input_ids"]["low"], specs["input_ids"]["high"]) == (0, VOCAB)
    assert "50-row table 'word_embeddings'" in specs["input_ids"]["from_model"]

    typed = run_trtpipe(tmp_path, "model.path=encoder.onnx", STAGES, "+data.inputs.input_ids={low:5,high:9}",
                        run_name="typed")
    assert typed.code == 0, typed.stdout + typed.stderr
    assert "input 'input_ids'" not in typed.stdout  # a range the user gives is not overridden
    assert (data_specs(typed)["input_ids"]["low"], data_specs(typed)["input_ids"]["high"]) == (5, 9)


def test_integer_inputs_without_a_readable_range_fail_once_naming_all_before_any_stage(tmp_path):
    onnx.save(unread_integer_model(), str(tmp_path / "unread.onnx"))
    run = run_trtpipe(tmp_path, "model.path=unread.onnx", STAGES)
    assert run.code == 2, run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "'a' (int64), 'b' (int64)" in errors[0], errors
    assert "running" not in run.stdout and not run.run_dir.exists()
    _, pasted = pasted_fixes(run.stderr)
    assert pasted == ["++data.inputs={a:{low:0,high:2,dtype:int64},b:{low:0,high:2,dtype:int64}}"], pasted
    again = run_trtpipe(tmp_path, "model.path=unread.onnx", STAGES, *pasted, run_name="pasted")
    assert again.code == 0, again.stdout + again.stderr


def test_a_sample_id_outside_the_embedding_table_is_refused_before_any_stage(tmp_path):
    onnx.save(encoder_model(), str(tmp_path / "encoder.onnx"))
    ids = np.arange(SEQ, dtype=np.int64)[None] * 10  # 0, 10, ..., 50: one past the last row
    np.savez(tmp_path / "d.npz", input_ids=ids, token_type_ids=np.zeros((1, SEQ), np.int64),
             attention_mask=np.ones((1, SEQ), np.int64))
    run = run_trtpipe(tmp_path, "model.path=encoder.onnx", "data.path=d.npz", STAGES)
    assert run.code == 2, run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "'input_ids'" in errors[0] and "holds 50" in errors[0], errors
    assert "50-row table 'word_embeddings'" in errors[0] and "0 to 49" in errors[0], errors
    assert "running" not in run.stdout

    np.savez(tmp_path / "d.npz", input_ids=ids - 1 - (ids == 0), token_type_ids=np.zeros((1, SEQ), np.int64),
             attention_mask=np.ones((1, SEQ), np.int64))  # -2 counts from the end: valid ONNX
    assert run_trtpipe(tmp_path, "model.path=encoder.onnx", "data.path=d.npz", STAGES, run_name="ok").code == 0
