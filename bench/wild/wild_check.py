"""What is true of a wild model *before* trtpipe touches it, found without trtpipe.

`original_facts(path, overrides)` answers: does the model pass the full ONNX checker,
does ONNX Runtime load it, and does ONNX Runtime run it on sample inputs built from
the catalogue's overrides (shapes and ranges, as the user typed them).

Decision: these facts are computed independently of trtpipe (own parsing of the
`+data.inputs.*` overrides, own random inputs), so a trtpipe bug cannot hide in them.
They let `bench.wild.wild` tell "trtpipe refused an invalid model or impossible data"
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


_SUBGRAPH_OPS = ("If", "Loop", "Scan")
_LOW = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def _has_low_precision(graph: onnx.GraphProto) -> bool:
    """Any FP16/BF16 tensor computed or stored in `graph` or its nested bodies."""
    if any(i.data_type in _LOW for i in graph.initializer):
        return True
    if any(v.type.tensor_type.elem_type in _LOW for v in [*graph.value_info, *graph.output]):
        return True
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i in _LOW:
                return True
            if attr.name == "value" and attr.t.data_type in _LOW:
                return True
            bodies = [attr.g] if attr.HasField("g") else list(attr.graphs)
            if any(_has_low_precision(b) for b in bodies):
                return True
    return False


def output_notes(run_dir) -> list[str]:
    """Facts about precision/model.onnx that the plan's totals do not show.

    Decision: a control-flow node the plan calls fp16 whose bodies compute nothing in
    FP16/BF16 is reported (issue 12, item 2: an If must not be labelled fp16 while its
    body stays FP32); so is an output model that fails the full ONNX checker.
    """
    import json
    from pathlib import Path

    run_dir = Path(run_dir)
    model_path, plan_path = run_dir / "precision" / "model.onnx", run_dir / "precision" / "precision_plan.json"
    if not model_path.is_file():
        return []
    notes = []
    try:
        onnx.checker.check_model(str(model_path), full_check=True)
    except Exception as error:
        notes.append(f"precision/model.onnx fails the checker: {type(error).__name__}: "
                     f"{str(error).splitlines()[0] if str(error) else ''}")
    planned = {}
    if plan_path.is_file():
        planned = {n["name"]: n["precision"] for n in json.loads(plan_path.read_text()).get("nodes", [])}
    model = onnx.load(str(model_path), load_external_data=False)
    hollow = []
    for node in model.graph.node:
        if node.op_type in _SUBGRAPH_OPS and planned.get(node.name) in ("fp16", "bf16"):
            bodies = [a.g for a in node.attribute if a.HasField("g")] + [g for a in node.attribute for g in a.graphs]
            if not any(_has_low_precision(b) for b in bodies):
                hollow.append(f"{node.op_type} {node.name}")
    if hollow:
        notes.append(f"planned fp16 but every body computes FP32: {', '.join(hollow)}")
    return notes
