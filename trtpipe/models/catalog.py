"""What the built-in models are, without building them (no onnx import).

Decision: the run's hot path (a fully cached run) needs the names, the generator
version and the sample-input specs, not the generators; keeping these here keeps
`onnx` and NumPy out of that path.
"""

from __future__ import annotations

# Part of every cache key that depends on a built-in model: bump it whenever a
# generator's output changes (weights, seeds, nodes, names, metadata).
BUILTIN_MODEL_VERSION = "2"  # 2: t5 and gpt2 added

TRANSFORMER_VOCAB_SIZE = 256
T5_VOCAB_SIZE = 320
DECODER_VOCAB_SIZE = 384

# name -> module in trtpipe.models holding `build_<name>()`
BUILTIN_MODULES = {
    "transformer": "transformer",
    "nafnet": "nafnet",
    "mixed_precision": "mixed_precision",
    "t5": "t5",
    "gpt2": "gpt2",
}

# Realistic sample inputs per model and input name, in the shape of `data.inputs.*`:
# integers from [low, high) (high exclusive), floats uniformly from [low, high).
BUILTIN_INPUT_SPECS: dict[str, dict[str, dict]] = {
    "transformer": {
        "input_ids": {"low": 0, "high": TRANSFORMER_VOCAB_SIZE, "dtype": "int64"},
        "attention_mask": {"low": 0, "high": 2, "dtype": "int64"},
    },
    "nafnet": {"image": {"low": 0.0, "high": 1.0, "dtype": "float32"}},
    "mixed_precision": {"x": {"low": -1.0, "high": 1.0, "dtype": "float32"}},
    "t5": {
        "input_ids": {"low": 0, "high": T5_VOCAB_SIZE, "dtype": "int64"},
        "attention_mask": {"low": 0, "high": 2, "dtype": "int64"},
    },
    "gpt2": {"input_ids": {"low": 0, "high": DECODER_VOCAB_SIZE, "dtype": "int64"}},
}
