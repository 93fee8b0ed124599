"""Parse the engine inspector's JSON (TensorRT 10.x and 11.x schemas) into one common form.

Schemas (sources):
- Both: `IEngineInspector.get_engine_information(LayerInformationFormat.JSON)` gives
  `{"Layers": [...], ...}`; with ProfilingVerbosity.DETAILED each layer is an object
  with "Name", "LayerType", "Inputs"/"Outputs" (lists of {"Name", "Dimensions", ...}),
  "Metadata" and tactic fields; with less verbosity layers are bare name strings
  (TensorRT trex parser.py; Polygraphy tools/inspect/.../extractors/_trt.py).
- 10.x: each tensor has one "Format/Datatype" string ("Row major linear FP32",
  "Channel major FP16 format where channel % 8 == 0", or a bare "Half"/"Float" for
  Myelin tensors — trex activations.py); I/O tensor names are in "Bindings", a list of
  strings.
- 11.x: "Format/Datatype" is split into "Datatype" and "Format" (Polygraphy 0.53
  `_infos_from_inspector_key`: "TensorRT 11 split the combined "Format/Datatype" field
  into separate "Datatype" and "Format" keys"), and "Bindings" is replaced by
  "I/O Tensors", a list of {"Name", "IOMode", "DataType", "Dimensions", ...}
  (TensorRT 11.x migration guide, "Migrating IEngineInspector Usage from TensorRT
  10.x to 11.x"). The guide spells the I/O-tensor key "DataType"; Polygraphy reads the
  per-layer key as "Datatype". Assumption: we accept either spelling in both places.
- Engines with several profiles may name layers of profile N>0 with a
  " [profile N]" suffix (trex `filter_profiles`); only profile 0's layers are kept.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from trtpipe.errors import UserError
from trtpipe.trt.inspect.layer_names import name_parts, onnx_nodes_in_metadata

FLOAT_DTYPES = ("fp32", "fp16", "bf16", "fp8", "fp4", "fp64")
LOW_DTYPES = ("fp16", "bf16", "fp8", "fp4")
# Token (lower case) -> normalised type; checked in this order, so "bfloat16" wins over "float".
_DTYPE_TOKENS = (
    (("bfloat16", "bf16"), "bf16"),
    (("float8", "fp8", "float8e4m3", "float8e5m2", "e4m3", "e5m2"), "fp8"),
    (("float4", "fp4", "e2m1"), "fp4"),
    (("half", "fp16", "float16"), "fp16"),
    (("double", "fp64", "float64"), "fp64"),
    (("float", "fp32", "float32"), "fp32"),
    (("int64",), "int64"), (("int32",), "int32"), (("int8",), "int8"), (("uint8",), "uint8"),
    (("int4",), "int4"), (("bool",), "bool"),
)
_OTHER_PROFILE = re.compile(r"\[profile +[1-9]\d*\]")
_MYELIN_TYPES = {"myelin", "kgen", "foreignnode"}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str | None  # fp32, fp16, bf16, int32, ... or None when the text names no type
    description: str  # the raw type/format text


@dataclass(frozen=True)
class EngineLayer:
    name: str
    layer_type: str
    onnx_nodes: tuple[str, ...]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    metadata: str = ""

    @property
    def fused(self) -> bool:
        """Several ONNX nodes in one engine layer (by metadata, or without it by a fused name such as
        `Conv_5 + Add_6 + Relu_7`), or a Myelin/ForeignNode layer."""
        return len(self.onnx_nodes) > 1 or self.is_myelin or (not self.onnx_nodes and len(name_parts(self.name)) > 1)

    @property
    def is_myelin(self) -> bool:
        return self.layer_type.lower() in _MYELIN_TYPES or "ForeignNode" in self.name

    def float_dtypes(self) -> list[str]:
        return sorted({t.dtype for t in (*self.inputs, *self.outputs) if t.dtype in FLOAT_DTYPES})


@dataclass
class EngineInfo:
    schema: str  # "10.x", "11.x" or "unknown"
    layers: list[EngineLayer] = field(default_factory=list)
    io_tensors: dict[str, str | None] = field(default_factory=dict)  # name -> dtype (None: not given)


def normalise_dtype(text: str | None) -> str | None:
    tokens = re.findall(r"[a-z0-9]+", (text or "").lower())
    for names, dtype in _DTYPE_TOKENS:
        if any(token in names for token in tokens):
            return dtype
    return None


def parse_engine_information(text: str) -> EngineInfo:
    try:
        document = json.loads(text)
    except ValueError as error:
        raise UserError(f"the engine inspector output is not JSON ({error})", "rebuild the engine") from error
    if not isinstance(document, dict) or not isinstance(document.get("Layers"), list):
        raise UserError("the engine inspector output has no 'Layers' list", "rebuild the engine")
    raw_layers = [layer for layer in document["Layers"]
                  if not (isinstance(layer, dict) and _OTHER_PROFILE.search(str(layer.get("Name", ""))))]
    if any(not isinstance(layer, dict) for layer in raw_layers):
        raise UserError("the engine's layer information has names only, no types",
                        "build with profiling verbosity DETAILED (trtpipe does; rebuild engines made elsewhere)")
    info = EngineInfo(schema=_schema(document, raw_layers))
    info.layers = [_layer(raw) for raw in raw_layers]
    if isinstance(document.get("I/O Tensors"), list):
        info.io_tensors = {t["Name"]: normalise_dtype(t.get("DataType") or t.get("Datatype"))
                           for t in document["I/O Tensors"] if isinstance(t, dict) and "Name" in t}
    elif isinstance(document.get("Bindings"), list):
        info.io_tensors = {str(name): None for name in document["Bindings"] if not _OTHER_PROFILE.search(str(name))}
    return info


def _schema(document: dict, layers: list[dict]) -> str:
    if "I/O Tensors" in document:
        return "11.x"
    if "Bindings" in document:
        return "10.x"
    tensors = [t for layer in layers for t in (*layer.get("Inputs", []), *layer.get("Outputs", [])) if isinstance(t, dict)]
    if any("Format/Datatype" in t for t in tensors):
        return "10.x"
    if any("Datatype" in t or "DataType" in t for t in tensors):
        return "11.x"
    return "unknown"


def _layer(raw: dict) -> EngineLayer:
    metadata = str(raw.get("Metadata") or "")
    return EngineLayer(
        name=str(raw.get("Name", "")),
        layer_type=str(raw.get("LayerType") or raw.get("ParameterType") or ""),
        onnx_nodes=tuple(onnx_nodes_in_metadata(metadata)),
        inputs=tuple(_tensor(t) for t in raw.get("Inputs") or [] if isinstance(t, dict)),
        outputs=tuple(_tensor(t) for t in raw.get("Outputs") or [] if isinstance(t, dict)),
        metadata=metadata,
    )


def _tensor(raw: dict) -> TensorInfo:
    if "Format/Datatype" in raw:  # 10.x
        text = str(raw["Format/Datatype"])
        return TensorInfo(str(raw.get("Name", "")), normalise_dtype(text), text)
    datatype = raw.get("Datatype", raw.get("DataType"))  # 11.x: the type alone decides
    text = " ".join(str(raw[k]) for k in ("Datatype", "DataType", "Format") if raw.get(k))
    return TensorInfo(str(raw.get("Name", "")), normalise_dtype(str(datatype or "")), text)
