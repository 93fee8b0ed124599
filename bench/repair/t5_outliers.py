"""The T5 of issue 30: a Hugging Face `T5EncoderModel` with trained T5 v1.1's outlier channels, exported.

    python -m bench.repair.t5_outliers OUT_DIR     # needs torch and transformers (the `bench` extra)

Writes OUT_DIR/model.onnx (the TorchScript exporter, opset 17) and OUT_DIR/inputs.npz. The config is
T5 v1.1's (`feed_forward_proj="gated-gelu"`) at d_model 256, d_ff 1024, 4 layers, 4 heads, relative
attention 32 buckets / distance 128; random weights (seed 0), then what random weights lack and
trained T5 v1.1 / flan-t5 checkpoints have: the FFN output projection (`wo`) rows of 2 hidden
channels scaled x100, x1,000, x5,000 and x100,000 in layers 1-4, so the residual stream carries
massive channels. The input is 100 token ids (fixed, drawn once from the vocabulary) then padding
to 128, with the attention mask 1 then 0.
Nothing is downloaded: the weights are random, the config is written here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

MASSIVE = (17, 101)  # the two hidden channels whose `wo` rows are scaled
SCALES = (100.0, 1_000.0, 5_000.0, 100_000.0)  # per layer, 1-4
REAL, SEQUENCE = 100, 128


def sample_inputs() -> dict[str, np.ndarray]:
    ids = np.zeros((1, SEQUENCE), np.int64)
    ids[0, :REAL] = np.random.default_rng(0).integers(3, 32000, REAL)
    ids[0, REAL - 1] = 1  # </s>, as a tokenizer ends a sequence
    mask = np.zeros((1, SEQUENCE), np.int64)
    mask[0, :REAL] = 1
    return {"input_ids": ids, "attention_mask": mask}


def export(out_dir: Path, seed: int = 0) -> None:
    import torch
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(seed)
    config = T5Config(vocab_size=32128, d_model=256, d_kv=64, d_ff=1024, num_layers=4, num_heads=4,
                      relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      feed_forward_proj="gated-gelu", dropout_rate=0.0)
    model = T5EncoderModel(config).eval()
    with torch.no_grad():
        for block, scale in zip(model.encoder.block, SCALES):
            block.layer[1].DenseReluDense.wo.weight[list(MASSIVE), :] *= scale
    inputs = sample_inputs()
    out_dir.mkdir(parents=True, exist_ok=True)
    np.savez(out_dir / "inputs.npz", **inputs)
    feeds = tuple(torch.from_numpy(inputs[name]) for name in ("input_ids", "attention_mask"))
    torch.onnx.export(model, feeds, str(out_dir / "model.onnx"), input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}})


if __name__ == "__main__":
    export(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0)
