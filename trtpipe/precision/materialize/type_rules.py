"""What an operator's ONNX schema says about the types of its inputs and outputs.

The schema (`onnx.defs.get_schema`) names, for every formal input and output,
either a fixed type (`tensor(float)` for Resize `scales`) or a type variable
(`T`, `T1`...) whose allowed types are listed in the type constraints. Inputs
and outputs bound to the same variable must share one type; that is what
decides which inputs follow a node's precision (see node_types.py).

Decision: schemas are looked up once per (domain, op_type, opset) and cached
for the life of the process. A schema is immutable data of the installed onnx
package, so the cache cannot go stale, and it keeps materialisation linear in
the number of nodes (a 2,000-node graph has a few dozen distinct operators).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import onnx
import onnx.defs

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.precision.network.element_types import element_type_of_schema_type

_VARIADIC = onnx.defs.OpSchema.FormalParameterOption.Variadic


@dataclass(frozen=True)
class FormalParameter:
    """One formal input or output of a schema: its name and its type string."""

    name: str
    type_str: str
    variadic: bool


@dataclass(frozen=True)
class OpTypeRules:
    """The type facts of one operator version that precision decisions need."""

    op_type: str
    domain: str
    opset: int
    inputs: tuple[FormalParameter, ...]
    outputs: tuple[FormalParameter, ...]
    # type variable -> the float element types it allows (FLOAT, FLOAT16, BFLOAT16, DOUBLE).
    float_types_of_variable: dict[str, frozenset[int]]

    def input_parameter(self, index: int) -> FormalParameter | None:
        return _parameter_at(self.inputs, index)

    def output_parameter(self, index: int) -> FormalParameter | None:
        return _parameter_at(self.outputs, index)

    def is_type_variable(self, type_str: str) -> bool:
        return type_str in self.float_types_of_variable

    def describe(self) -> str:
        """`Resize (opset 17)`, for reasons written into reports."""
        domain = "" if self.domain in DEFAULT_DOMAINS else f"{self.domain}::"
        return f"{domain}{self.op_type} (opset {self.opset})"


def _parameter_at(parameters: tuple[FormalParameter, ...], index: int) -> FormalParameter | None:
    if index < len(parameters):
        return parameters[index]
    # Only a trailing variadic parameter repeats (Concat's inputs, Split's outputs).
    if parameters and parameters[-1].variadic:
        return parameters[-1]
    return None


def opset_versions(model: onnx.ModelProto) -> dict[str, int]:
    """Domain -> imported opset version; the default domain is reachable as '' and 'ai.onnx'."""
    versions = {entry.domain: entry.version for entry in model.opset_import}
    for alias in DEFAULT_DOMAINS:
        if alias in versions:
            for other in DEFAULT_DOMAINS:
                versions.setdefault(other, versions[alias])
    return versions


@functools.lru_cache(maxsize=None)
def op_type_rules(domain: str, op_type: str, opset: int) -> OpTypeRules | None:
    """The schema's type facts, or None when onnx has no schema (custom or function ops)."""
    lookup_domain = "" if domain in DEFAULT_DOMAINS else domain
    try:
        schema = onnx.defs.get_schema(op_type, opset, lookup_domain)
    except onnx.defs.SchemaError:
        return None
    return OpTypeRules(
        op_type=op_type,
        domain=lookup_domain,
        opset=opset,
        inputs=tuple(_formal(parameter) for parameter in schema.inputs),
        outputs=tuple(_formal(parameter) for parameter in schema.outputs),
        float_types_of_variable={
            constraint.type_param_str: frozenset(
                element
                for element in map(element_type_of_schema_type, constraint.allowed_type_strs)
                if element is not None
            )
            for constraint in schema.type_constraints
        },
    )


def _formal(parameter) -> FormalParameter:
    return FormalParameter(parameter.name, parameter.type_str, parameter.option == _VARIADIC)
