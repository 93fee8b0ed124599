"""What is true of a wild model *before* trtpipe touches it, found without trtpipe.

`original_facts(path, overrides)` answers: does the model pass the full ONNX checker,
does ONNX Runtime load it, and does ONNX Runtime run it on sample inputs built from
the catalogue's overrides (shapes and ranges, as the user typed them).

Decision: these facts are computed independently of trtpipe (own parsing of the
`+data.inputs.*` overrides, own random inputs), so a trtpipe bug cannot hide in them.
They let `bench.wild` tell "trtpipe refused an invalid model or impossible data"
from "trtpipe blamed a valid model, or refused data ONNX Runtime accepts".
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import yaml


@dataclass
class OriginalFacts:
    checker_ok: bool
    checker_error: str
    ort_runs: bool
    ort_error: str

    @property
    def valid(self) -> bool:
        return self.checker_ok and self.ort_runs


def data_specs(overrides: tuple[str, ...]) -> dict[str, dict]:
    """`+data.inputs.<input>.<key>=<value>` overrides -> {input: {key: value}}."""
    specs: dict[str, dict] = {}
    for item in overrides:
        key, _, value = item.lstrip("+").partition("=")
        parts = key.split(".")
        if parts[:2] == ["data", "inputs"] and len(parts) == 4:
            specs.setdefault(parts[2], {})[parts[3]] = yaml.safe_load(value)
    return specs


def _feeds(model: onnx.ModelProto, specs: dict[str, dict], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    initializers = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        spec = specs.get(vi.name, {})
        tensor = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        shape = spec.get("shape")
        if shape is None:
            shape = [d.dim_value for d in tensor.shape.dim]
            if any(s <= 0 for s in shape):
                raise ValueError(f"input {vi.name} has dynamic dims and the catalogue gives no shape")
        low, high = spec.get("low", -1.0), spec.get("high", 1.0)
        if np.issubdtype(dtype, np.integer):
            feeds[vi.name] = rng.integers(int(low), int(high), size=shape).astype(dtype)
        else:
            feeds[vi.name] = rng.uniform(low, high, size=shape).astype(dtype)
    return feeds


def original_facts(path, overrides: tuple[str, ...]) -> OriginalFacts:
    import onnxruntime as ort

    checker_ok, checker_error = True, ""
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as error:  # the checker's own verdict, recorded verbatim
        checker_ok, checker_error = False, f"{type(error).__name__}: {error}".splitlines()[0]
    ort_runs, ort_error = True, ""
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        session.run(None, _feeds(onnx.load(str(path), load_external_data=False), data_specs(overrides)))
    except Exception as error:
        ort_runs, ort_error = False, f"{type(error).__name__}: {error}".splitlines()[0]
    return OriginalFacts(checker_ok, checker_error, ort_runs, ort_error)
