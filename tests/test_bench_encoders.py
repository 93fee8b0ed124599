"""bench/common/encoders.py's width parameter: other widths build a runnable encoder, the default's bytes
and trtpipe's model constants are untouched."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from bench.common.encoders import build_encoder
from trtpipe.models import transformer
from trtpipe.numerics.reference import ReferenceRunner


def test_the_default_width_is_the_built_in_width_to_the_byte():
    assert build_encoder(1).SerializeToString() == build_encoder(1, transformer.HIDDEN).SerializeToString()


def test_a_wider_encoder_runs_and_leaves_the_model_constants_as_they_were():
    before = (transformer.HIDDEN, transformer.FFN, transformer.HEADS, transformer.HEAD_DIM)
    default = build_encoder(1).SerializeToString()
    model = build_encoder(1, 128)
    assert (transformer.HIDDEN, transformer.FFN, transformer.HEADS, transformer.HEAD_DIM) == before
    assert build_encoder(1).SerializeToString() == default
    onnx.checker.check_model(model, full_check=True)
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    assert weights["encoder.layer.0.intermediate.dense.weight"] == (128, 512)  # FFN 4 x hidden
    rng = np.random.default_rng(0)
    feed = {"input_ids": rng.integers(0, transformer.VOCAB_SIZE, (2, transformer.SEQUENCE_LENGTH)),
            "attention_mask": np.ones((2, transformer.SEQUENCE_LENGTH), dtype=np.int64)}
    outputs = ReferenceRunner(model).run(feed)
    assert outputs["last_hidden_state"].shape == (2, transformer.SEQUENCE_LENGTH, 128)
    assert outputs["pooler_output"].shape == (2, 128)
    assert all(np.isfinite(value).all() for value in outputs.values())


def test_a_width_without_whole_heads_is_refused():
    with pytest.raises(ValueError, match="multiple of 64"):
        build_encoder(1, 100)
