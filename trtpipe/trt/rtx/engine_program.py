"""The Myelin program a TensorRT-RTX engine carries, read as text: which ops of the engine are
linear (convolution, fully connected, matrix multiply, attention), which ONNX nodes each one
implements, and the element types of the tensors it reads (issue 31, item 3).

TensorRT-RTX 1.7.1 compiles the whole network into one Myelin graph and serialises its program
into the engine as text, one declaration a line, e.g. (measured on sm89 engines built ahead of
time by the oracle, bench/rtx):

    tensor={ ... dims={ 8 4 3 3 } name="__mye1595_dconst" ... type=int8 }
    sub_tensor={ base="p_QuantizeLinear_Output.1" ... name="__mye1657^deref" ... type=int8 }
    corrltn={ name="c1" output={...} input={"__mye1089c1_o.1_2" "__mye1595_dconst" ...} ...
        layers="[ONNX Layer: c1]" }
    fully_connected={ name="fc" ... input={"__mye1657^deref" "__mye1552dconst" ...} ... }
    function={ name=__myl_MulMinMax... output_args={ "c1_o.1_2" } ... layers="[ONNX Layer: x_QuantizeLinear]
    [ONNX Layer: ...]" ... }

A linear op's first two inputs are its operands (activation and weight, or the two matrices;
the rest are scales and biases); it is *quantized* when both are 8-bit or narrower integer or
float types (int8, fp8_e4m3, int4, fp4). Decision: the program, not the parser's log, is the
truth for "still quantized": the parser reads a Q/DQ pair as written, while the builder may
lower it to FP32 constants (ONNX Runtime's INT32 bias DQ made TensorRT-RTX 1.7.1 do so for a
whole model, issue 31) or fuse a small Gemm into a pointwise kernel (then no linear op is left
to be quantized; the reader reports what the engine holds, nothing more).

`function` entries (Myelin's generated kernels) are read too, with their ONNX layers and output
types, so a caller can tell whether a kernel made only of planned-FP16 nodes writes FP32.

Pure text parsing: nothing is loaded or executed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Myelin op kinds that are linear layers (measured: `corrltn` for Conv, `fully_connected` for
# Gemm/MatMul with a constant weight; `gemm`, `bmm`, `matmul`, `mha`, `attention` are the kinds
# a MatMul of two activations or a fused attention may take; a kind not listed here is not linear).
LINEAR_KINDS = ("corrltn", "convolution", "deconvolution", "fully_connected", "gemm", "bmm", "matmul",
                "batch_matmul", "mha", "attention", "fmha")
QUANTIZED_TYPES = frozenset({"int8", "uint8", "fp8_e4m3", "fp8_e5m2", "fp8", "int4", "fp4", "fp4_e2m1"})

_TENSOR = re.compile(r'^ {2}(?:tensor|sub_tensor)=\{[^\n]*?\bname="([^"]+)"[^\n]*?\btype=(\w+)', re.M)
_OP = re.compile(r'^ {2}(\w+)=\{ name=(?:"([^"]*)"|(\S+))(.*?)(?=^ {2}\w+=\{|\Z)', re.M | re.S)
_INPUTS = re.compile(r'\binput(?:_args)?=\{([^}]*)\}')
_OUTPUTS = re.compile(r'\boutput(?:_args)?=\{([^}]*)\}')
_LAYERS = re.compile(r'layers="([^"]*)"')
_LAYER = re.compile(r"\[ONNX Layer: ([^\]]+)\]")
_QUOTED = re.compile(r'"([^"]+)"')


@dataclass(frozen=True)
class EngineOp:
    kind: str                    # Myelin's op kind: corrltn, fully_connected, function, ...
    name: str
    layers: tuple[str, ...]      # the ONNX nodes it implements, as the program names them
    input_types: tuple[str, ...]
    output_types: tuple[str, ...]

    @property
    def linear(self) -> bool:
        return self.kind in LINEAR_KINDS

    @property
    def operand_types(self) -> tuple[str, ...]:
        """A linear op's two operands (activation/weight or the two matrices)."""
        return self.input_types[:2]

    @property
    def quantized(self) -> bool:
        operands = self.operand_types
        return len(operands) == 2 and all(t in QUANTIZED_TYPES for t in operands)

    @property
    def types(self) -> str:
        return "x".join(self.operand_types) if self.linear else ",".join(self.output_types)


@dataclass(frozen=True)
class EngineProgram:
    ops: tuple[EngineOp, ...]

    @property
    def linear(self) -> tuple[EngineOp, ...]:
        return tuple(op for op in self.ops if op.linear)

    @property
    def kernels(self) -> tuple[EngineOp, ...]:
        return tuple(op for op in self.ops if op.kind == "function")


def read(engine: bytes) -> EngineProgram:
    """The program's linear ops and generated kernels, in the order the program lists them."""
    text = engine.decode("latin-1")
    types = dict(_TENSOR.findall(text))
    ops = []
    for kind, quoted, bare, body in _OP.findall(text):
        if kind in ("tensor", "sub_tensor") or not (kind in LINEAR_KINDS or kind == "function"):
            continue
        body = body[:body.find("\x00")] if "\x00" in body else body
        layers = _LAYERS.search(body)
        ops.append(EngineOp(
            kind=kind, name=quoted or bare,
            layers=tuple(_LAYER.findall(layers.group(1))) if layers else (),
            input_types=_types(_INPUTS.search(body), types),
            output_types=_types(_OUTPUTS.search(body), types)))
    return EngineProgram(tuple(ops))


def _types(match, types: dict) -> tuple[str, ...]:
    return tuple(types.get(name, "?") for name in _QUOTED.findall(match.group(1))) if match else ()


def engine_bytes(epcontext_model: Path) -> bytes:
    """The engine of an EPContext model: embedded (`embed_mode=1`, the attribute holds the bytes) or a
    file next to the model (`embed_mode=0`, the attribute holds its relative path)."""
    import onnx

    model = onnx.load(str(epcontext_model), load_external_data=False)
    engines = []
    for node in model.graph.node:
        if node.op_type != "EPContext":
            continue
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        context = attributes.get("ep_cache_context", b"")
        engines.append(context if attributes.get("embed_mode", 1) else
                       (epcontext_model.parent / context.decode()).read_bytes())
    if not engines:
        raise ValueError(f"{epcontext_model}: no EPContext node, no engine to read")
    return b"".join(engines)
