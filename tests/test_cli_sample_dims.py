"""The dims of a dynamic input come from the model's other inputs or a stated default (issue 30, item 5).

Before: an encoder whose input_ids and attention_mask are [batch, sequence] stopped with "has dynamic
dimensions", and the Fix (`shape: [1, 1]`) gave a verdict on sequences of one token and an engine
profile of 1x1. Through the real command line on a small encoder built with onnx.helper: ids index an
embedding table, the mask is cast and taken from 1, both with a dynamic batch and sequence."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe
from tests.models.attention_mask import mask_bias_weights, masked_add_nodes

VOCAB, WIDTH = 40, 8
NO_BUILD = "stages=[sanitize,upgrade_opset,precision,validate]"


def dynamic_encoder(dims=("batch", "sequence")) -> onnx.ModelProto:
    """input_ids -> Gather(table) -> + mask bias (1 - mask) * -1e4 -> MatMul; `dims` of both inputs
    (None: a dim with no name and no size)."""
    rng = np.random.RandomState(0)
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["d0", "d1"])
              for name in ("input_ids", "attention_mask")]
    for value in inputs:
        for dim, name in zip(value.type.tensor_type.shape.dim, dims):
            dim.Clear()
            if name is not None:
                dim.dim_param = name
    weights = [numpy_helper.from_array(rng.randn(VOCAB, WIDTH).astype(np.float32), "word_embeddings"),
               numpy_helper.from_array(rng.randn(WIDTH, WIDTH).astype(np.float32), "dense"),
               *mask_bias_weights()]
    nodes = [
        helper.make_node("Gather", ["word_embeddings", "input_ids"], ["words"], name="embed_words"),
        *masked_add_nodes("attention_mask", "words", "masked"),
        helper.make_node("MatMul", ["masked", "dense"], ["y"], name="dense"),
    ]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], dims[1], WIDTH])
    graph = helper.make_graph(nodes, "encoder", inputs, [output], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sample_dims")
    onnx.save(dynamic_encoder(), str(directory / "named.onnx"))
    onnx.save(dynamic_encoder((None, None)), str(directory / "unnamed.onnx"))
    return directory


def data_lines(run) -> dict[str, str]:
    lines = [line.strip() for line in run.stdout.splitlines() if line.strip().startswith("data ")]
    return {line.split("'")[1]: line for line in lines if ": shape [" in line}


def spec(run, name: str) -> dict:
    precision = next(stage for stage in run.manifest["stages"] if stage["name"] == "precision")
    return precision["material"]["config"]["data"]["inputs"][name]


def test_an_encoder_without_data_gets_sequences_of_the_default_length_and_their_profile(workdir):
    run = run_trtpipe(workdir, f"model.path={workdir / 'named.onnx'}", cache=workdir / "cache", run_name="named")
    assert run.code == 0, run.stdout + run.stderr
    lines = data_lines(run)
    assert "shape [1, 128]: dim 0 'batch' 1 (the default batch), dim 1 'sequence' 128 (data.sequence_length" \
        in lines["input_ids"], lines
    assert "shape [1, 128]: dim 0 'batch' 1 (as 'input_ids'), dim 1 'sequence' 128 (as 'input_ids')" \
        in lines["attention_mask"], lines
    assert run.stdout.index("shape [1, 128]") < run.stdout.index("sanitize        running")
    assert spec(run, "attention_mask")["shape"] == [1, 128]  # in the key material, with its reasons
    assert spec(run, "attention_mask")["shape_from"] == ["as 'input_ids'", "as 'input_ids'"]
    assert run.statuses()["build"] == "deferred" and run.statuses()["validate"] == "ran"
    commands = (run.run_dir / "build" / "trtexec.txt").read_text()  # the engine profile: the sample shapes
    assert "--optShapes=input_ids:1x128,attention_mask:1x128" in commands, commands


def test_the_shape_given_for_one_input_sizes_the_inputs_sharing_its_dims(workdir):
    run = run_trtpipe(workdir, f"model.path={workdir / 'named.onnx'}", NO_BUILD, "++data.inputs.input_ids.shape=[2,16]",
                      cache=workdir / "cache", run_name="given")
    assert run.code == 0, run.stdout + run.stderr
    assert "input_ids" not in data_lines(run)  # given, not decided
    assert "shape [2, 16]: dim 0 'batch' 2 (as 'input_ids''s data shape)" in data_lines(run)["attention_mask"]
    assert spec(run, "attention_mask")["shape"] == [2, 16]


def test_unnamed_dims_of_token_inputs_of_the_same_rank_are_the_same_tokens(workdir):
    run = run_trtpipe(workdir, f"model.path={workdir / 'unnamed.onnx'}", NO_BUILD, "data.sequence_length=24",
                      "++data.inputs.attention_mask.shape=[3,10]", cache=workdir / "cache", run_name="unnamed")
    assert run.code == 0, run.stdout + run.stderr
    assert "shape [3, 10]: dim 0 3 (as 'attention_mask' (a token input of the same rank))" \
        in data_lines(run)["input_ids"], run.stdout
    alone = run_trtpipe(workdir, f"model.path={workdir / 'unnamed.onnx'}", NO_BUILD, "data.sequence_length=24",
                        cache=workdir / "cache", run_name="unnamed_alone")
    assert alone.code == 0, alone.stdout + alone.stderr
    assert spec(alone, "input_ids")["shape"] == [1, 24] and spec(alone, "attention_mask")["shape"] == [1, 24]


def test_a_range_the_user_gives_keeps_the_shape_the_model_states(workdir):
    """input_ids with the user's range is still token ids (the model says so): [1, 128], not an error."""
    run = run_trtpipe(workdir, f"model.path={workdir / 'named.onnx'}", NO_BUILD, "++data.inputs.input_ids={low:3,high:9}",
                      cache=workdir / "cache", run_name="ranged")
    assert run.code == 0, run.stdout + run.stderr
    assert spec(run, "input_ids")["shape"] == [1, 128] and spec(run, "input_ids")["low"] == 3
