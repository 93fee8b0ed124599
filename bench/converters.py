"""The two converters under comparison, each as one timed call: prepared ONNX in, mixed ONNX file out.

- `convert_with_trtpipe`: trtpipe's whole precision stage, `PlanPrecision.run`,
  as the pipeline calls it: load, name the nodes, index the network, draw the
  sample inputs, plan (including the FP32 reference run of the range rule),
  materialise, save the model and write `precision_plan.json`.
- `convert_with_autocast`: `modelopt.onnx.autocast.convert_to_mixed_precision`
  (its own loading, graph sanitizer, type inference, node classification and
  conversion) followed by `onnx.save`, handed trtpipe's FP32 nodes as its
  exclusions and with its own automatic rules switched off (`autocast_fairness`).

AutoCast is optional (`pip install -e .[bench]`): `autocast_unavailable()`
says why it cannot be used here, or returns None.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import onnx

FP32_PRECISIONS = ("fp32",)
FUSED_LAYERNORM_PREFIX = "LayerNorm_"  # modelopt GraphSanitizer._create_layernorm_node


def convert_with_trtpipe(model_path: Path, precision_config: dict, out_dir: Path) -> Path:
    from trtpipe.stages.precision import PlanPrecision

    out_dir.mkdir(parents=True, exist_ok=True)
    outcome = PlanPrecision().run({"model": model_path}, precision_config, out_dir)
    return out_dir / outcome.outputs["model"]


def trtpipe_fp32_nodes(plan_path: Path, model_path: Path) -> list[str]:
    """The nodes trtpipe's plan makes compute in FP32: these are AutoCast's exclusions.

    Planned `fp32`, plus nodes kept as authored that the author wrote in FP32
    (the FP32 norm of `mixed_precision`): AutoCast has no "keep as authored", so
    an authored FP32 node it is not told about would be converted to FP16.
    Casts and nodes without a float output have no precision to set.
    """
    plan = json.loads(plan_path.read_text())
    authored_fp32 = _nodes_computing_fp32(onnx.load(str(model_path)))
    return [
        node["name"] for node in plan["nodes"]
        if node["precision"] in FP32_PRECISIONS or (node["precision"] == "keep" and node["name"] in authored_fp32)
    ]


def _nodes_computing_fp32(model: onnx.ModelProto) -> set[str]:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *inferred.graph.output]}
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    found = set()
    for node in model.graph.node:
        outputs = [types.get(t) for t in node.output if types.get(t) in float_types]
        if node.op_type != "Cast" and outputs and all(t == onnx.TensorProto.FLOAT for t in outputs):
            found.add(node.name)
    return found


def autocast_unavailable() -> str | None:
    """None if AutoCast can be imported, else the reason (the import error, verbatim)."""
    try:
        from modelopt.onnx.autocast import convert_to_mixed_precision  # noqa: F401
    except Exception as error:  # ImportError, or a failure inside modelopt's own imports
        return f"{type(error).__name__}: {error}"
    logging.getLogger("modelopt.onnx").setLevel(logging.WARNING)
    from modelopt.onnx.autocast.logging_config import configure_logging

    configure_logging("WARNING")  # its INFO log writes one line per node to stdout
    return None


def autocast_version() -> str:
    from importlib.metadata import version

    return version("nvidia-modelopt")


def exact_names_pattern(names: list[str]) -> str:
    """One regex matching exactly these node names (AutoCast tests `re.match(pattern, node.name)`).

    One alternation rather than one pattern per name: AutoCast tries every
    pattern on every node, and more than 512 distinct patterns overflow the
    `re` module's cache, so a list of 200+ names would be recompiled on every
    node and charge AutoCast for our way of passing them.
    """
    return "(?:" + "|".join(re.escape(name) for name in sorted(names)) + r")\Z"


def autocast_fairness(fp32_nodes: list[str]) -> dict:
    """AutoCast's arguments that make it apply exactly trtpipe's exclusions and nothing else.

    - `nodes_to_exclude`: trtpipe's FP32 nodes, matched exactly, and the LayerNormalization
      AutoCast's graph sanitizer makes of a decomposed LayerNorm whose ReduceMean is
      one of them (it names it `LayerNorm_<ReduceMean name>`; the fusion cannot be
      switched off), so an excluded norm stays FP32 in AutoCast too;
    - `op_types_to_exclude`, `nodes_to_include`, `op_types_to_include`: empty;
    - `data_max=None`: no activation-range rule, hence no reference run (trtpipe's
      time includes its own reference run: the comparison favours AutoCast);
    - `init_max=None`: no initializer-range rule (trtpipe's constant rule already
      put the nodes whose weights do not fit FP16 into the list);
    - `max_depth_of_reduction=None`, no `custom_rule`: its other rules are off.
    """
    return {
        "low_precision_type": "fp16",
        "nodes_to_exclude": [exact_names_pattern(fp32_nodes + [FUSED_LAYERNORM_PREFIX + n for n in fp32_nodes])]
        if fp32_nodes else [],
        "op_types_to_exclude": [],
        "nodes_to_include": [],
        "op_types_to_include": [],
        "data_max": None,
        "init_max": None,
        "max_depth_of_reduction": None,
        "keep_io_types": True,
        "providers": ["cpu"],
    }


def convert_with_autocast(model_path: Path, arguments: dict, out_dir: Path) -> Path:
    from modelopt.onnx.autocast import convert_to_mixed_precision

    out_dir.mkdir(parents=True, exist_ok=True)
    converted = convert_to_mixed_precision(onnx_path=str(model_path), **arguments)
    out_path = out_dir / "model.onnx"
    onnx.save(converted, str(out_path))
    return out_path
