"""The two converters under comparison, each as one timed call: the raw export in, a mixed ONNX file out.

- `convert_whole_path`: trtpipe's whole path as its recipe runs it, through
  the real stage code: `SanitizeModel.run` -> `UpgradeOpset.run` ->
  `PlanPrecision.run` (load, name the nodes, index the network, draw the
  sample inputs, plan including the FP32 reference run of the range rule,
  materialise, save the model and write `precision_plan.json`), each stage
  reading the file the previous one wrote, as the pipeline does (minus its
  cache bookkeeping).
- `convert_with_autocast`: `modelopt.onnx.autocast.convert_to_mixed_precision`
  on the same raw file (its own loading, graph sanitizer, type inference, node
  classification, conversion) followed by `onnx.save`, with one of two
  argument sets:
  - `autocast_matched`: trtpipe's FP32 nodes as its exclusions and its own
    automatic rules off (the "matched exclusions" comparison);
  - `autocast_defaults`: its defaults (range rule `data_max=512` with its own
    reference run on random inputs, `init_max`, float I/O turned FP16), only
    the precision named (the "each tool's defaults" comparison).
- `load_save`: `onnx.load` + `onnx.save` of the raw export, the yardstick the
  whole path is divided by.

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


def convert_whole_path(raw_path: Path, stage_configs: dict, out_dir: Path) -> Path:
    """The recipe's stages on `raw_path`, each in its own directory under out_dir; returns the mixed model."""
    return run_stages(raw_path, stage_configs, out_dir)


def run_stages(model_path: Path, stage_configs: dict, out_dir: Path) -> Path:
    """`stage_configs`' stages (sanitize, upgrade_opset, precision), in order, through the real stage code."""
    from trtpipe.stages.precision import PlanPrecision
    from trtpipe.stages.sanitize import SanitizeModel
    from trtpipe.stages.upgrade_opset import UpgradeOpset

    stages = {stage.name: stage for stage in (SanitizeModel, UpgradeOpset, PlanPrecision)}
    for name, config in stage_configs.items():
        stage_dir = out_dir / name
        stage_dir.mkdir(parents=True, exist_ok=True)
        outcome = stages[name]().run({"model": model_path}, config, stage_dir)
        model_path = stage_dir / outcome.outputs["model"]
    return model_path


def load_save(raw_path: Path, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "copy.onnx"
    onnx.save(onnx.load(str(raw_path)), str(out))
    return out


def trtpipe_fp32_nodes(plan_path: Path, model_path: Path) -> list[str]:
    """The nodes trtpipe's plan makes compute in FP32 (names of the model the precision stage read).

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


def exclusion_aliases(fp32_nodes: list[str], precision_input: Path) -> dict[str, list[str]]:
    """Each FP32 node -> the names it may have in a conversion of the raw export.

    A node upgrade_opset fused (a LayerNormalization) does not exist in the raw
    export: its aliases are the nodes it absorbed (recorded in the model's
    metadata) and the name AutoCast's sanitizer gives its own fusion of them,
    `LayerNorm_<ReduceMean name>`; AutoCast fuses by itself and cannot be told not to.
    """
    from trtpipe.graph.names.absorbed_nodes import read_absorbed_nodes

    absorbed = read_absorbed_nodes(onnx.load(str(precision_input), load_external_data=False))
    aliases = {}
    for name in fp32_nodes:
        parts = absorbed.get(name, [])
        aliases[name] = [name, *parts, *(FUSED_LAYERNORM_PREFIX + part for part in parts)]
    return aliases


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
    return "(?:" + "|".join(re.escape(name) for name in sorted(set(names))) + r")\Z"


def autocast_matched(aliases: dict[str, list[str]]) -> dict:
    """AutoCast's arguments that make it apply exactly trtpipe's exclusions and nothing else.

    - `nodes_to_exclude`: every alias of trtpipe's FP32 nodes (`exclusion_aliases`), matched exactly;
    - `op_types_to_exclude`, `nodes_to_include`, `op_types_to_include`: empty;
    - `data_max=None`: no activation-range rule, hence no reference run (trtpipe's
      time includes its own reference run: the comparison favours AutoCast);
    - `init_max=None`: no initializer-range rule (trtpipe's constant rule already
      put the nodes whose weights do not fit FP16 into the list);
    - `max_depth_of_reduction=None`, no `custom_rule`: its other rules are off;
    - `keep_io_types=True`: float graph inputs and outputs keep their type, as trtpipe's recipes do.
    """
    names = [alias for group in aliases.values() for alias in group]
    return {
        "low_precision_type": "fp16",
        "nodes_to_exclude": [exact_names_pattern(names)] if names else [],
        "op_types_to_exclude": [],
        "nodes_to_include": [],
        "op_types_to_include": [],
        "data_max": None,
        "init_max": None,
        "max_depth_of_reduction": None,
        "keep_io_types": True,
        "providers": ["cpu"],
    }


def autocast_defaults() -> dict:
    """AutoCast as a user calls it first: FP16, every other argument its default (providers: CPU, its default)."""
    return {"low_precision_type": "fp16"}


def convert_with_autocast(raw_path: Path, arguments: dict, out_dir: Path) -> Path:
    from modelopt.onnx.autocast import convert_to_mixed_precision

    out_dir.mkdir(parents=True, exist_ok=True)
    converted = convert_to_mixed_precision(onnx_path=str(raw_path), **arguments)
    out_path = out_dir / "model.onnx"
    onnx.save(converted, str(out_path))
    return out_path
