"""Sizes for the dynamic dimensions of generated sample inputs, read from the model (issue 30, item 5).

Before, every dynamic input needed `data.inputs.<name>.shape`, and the Fix printed for a token-id
input (`shape: [1, 1]`) gave a "passing" verdict on sequences of one token and an engine profile of
1x1. The model often says more:

- A dim_param names a size: inputs that share one (`input_ids: [batch, sequence]`,
  `attention_mask: [batch, sequence]`) have the same size there (TensorRT reads shared names the same
  way). A size the sample data gives for one input (its `data.inputs.<name>.shape`, or build profile
  0's opt shape) is every sharing input's size.
- Token inputs: an integer input whose range the model states (ids indexing an embedding table, a
  mask; numerics/input_ranges.py) is [batch, positions...]: its first dim defaults to 1 (one
  sample) and every other dynamic dim is a sequence position, `data.sequence_length` long (default
  128: a length at which attention and LayerNorm statistics mean something, and the usual
  profile opt of BERT-class deployments). Two token inputs of the same rank whose dims the model does
  not name are the same tokens (ids and their mask): an unnamed dim takes the size the other gives.
- Nothing else is guessed: a float input with a dynamic dim that no other input sizes (an image's
  height) still asks for its shape, since no default is right for every model. No input or dim name is
  read for its meaning ("seq", "input_ids"): exporters spell them differently.

Each filled dim carries where it came from: printed once in the data line, recorded with the shape in
the data block (`shape_from`), so it is in the keys of the stages that run the model. Only inputs
that had no shape are filled: a run that worked before (every dynamic input had a shape) keeps its
keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

DEFAULT_SEQUENCE_LENGTH = 128


def filled_shapes(inputs: Sequence[onnx.ValueInfoProto], specs: Mapping[str, Mapping],
                  token_inputs: Sequence[str], sequence_length: int) -> dict[str, tuple[list[int], list[str]]]:
    """{input: (shape, where each dim came from)} for every dynamic input without a given shape whose
    every dynamic dim the rules above size; `token_inputs`: the integer inputs the model states a range
    for (ids, masks)."""
    from trtpipe.onnxmodel import input_dims

    given = {value.name: [int(size) for size in specs[value.name]["shape"]]
             for value in inputs if (specs.get(value.name) or {}).get("shape")}
    named: dict[str, tuple[int, str]] = {}  # dim_param -> (size, where it came from)
    for value in inputs:
        if value.name in given and input_dims.dims(value) is not None:
            for param, size in zip(_params(value), given[value.name]):
                if param:
                    named.setdefault(param, (size, f"as {value.name!r}'s data shape"))
    wanted = [value for value in inputs if value.name not in given and input_dims.is_dynamic(input_dims.dims(value))
              and input_dims.dims(value) is not None]
    tokens = set(token_inputs)
    wanted.sort(key=lambda value: value.name not in tokens)  # token inputs first: their defaults size the rest
    filled: dict[str, tuple[list[int], list[str]]] = {}
    for value in wanted:
        sized = _sized(value, named, given, filled, tokens, sequence_length)
        if sized is not None:
            filled[value.name] = sized
            for param, size, why in zip(_params(value), *sized):
                if param:
                    named.setdefault(param, (size, why if why.startswith("as ") else f"as {value.name!r}"))
    return filled


def _params(value: onnx.ValueInfoProto) -> list[str]:
    return [dim.dim_param if not dim.HasField("dim_value") else "" for dim in value.type.tensor_type.shape.dim]


def _sized(value, named, given, filled, tokens, sequence_length):
    from trtpipe.onnxmodel import input_dims

    declared = input_dims.dims(value)
    shape, reasons = [], []
    for axis, (size, param) in enumerate(zip(declared, _params(value))):
        if size is not None:
            shape.append(size), reasons.append("fixed by the model")
        elif param and param in named:
            shape.append(named[param][0]), reasons.append(named[param][1])
        elif not param and value.name in tokens and (peer := _token_peer(value, axis, given, filled, tokens)):
            shape.append(peer[0]), reasons.append(peer[1])
        elif value.name in tokens and axis == 0:
            shape.append(1), reasons.append("the default batch")
        elif value.name in tokens:
            shape.append(sequence_length), reasons.append("data.sequence_length, a position of a token input")
        else:
            return None
    return shape, reasons


def _token_peer(value, axis: int, given, filled, tokens) -> tuple[int, str] | None:
    """The size an unnamed dim of a token input takes from another token input of the same rank."""
    rank = len(value.type.tensor_type.shape.dim)
    for name in sorted(tokens):
        shape = given.get(name) or (filled.get(name) or (None,))[0]
        if name != value.name and shape is not None and len(shape) == rank:
            return shape[axis], f"as {name!r} (a token input of the same rank)"
    return None


def shape_line(shape: Sequence[int], reasons: Sequence[str], value: onnx.ValueInfoProto) -> str:
    """`[1, 128]: dim 0 'batch' 1 (the default batch), dim 1 'sequence' 128 (...)`, fixed dims left out."""
    parts = [f"dim {axis}{' ' + repr(param) if param else ''} {size} ({why})"
             for axis, (size, why, param) in enumerate(zip(shape, reasons, _params(value))) if why != "fixed by the model"]
    return "[" + ", ".join(str(size) for size in shape) + "]: " + ", ".join(parts)
