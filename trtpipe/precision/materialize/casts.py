"""Insert the fewest Casts where a tensor's produced type differs from what a consumer needs.

For every float tensor, every consumer is served, in this order of preference:

1. a type the tensor is already available in (its produced type, a stored
   weight copy, or a Cast made earlier for another consumer): at most one
   Cast per (tensor, type), shared by all consumers needing that type;
2. looking through the author's lossless Casts: if the tensor is
   `Cast(x, to=fp32)` of an fp16 `x` and the consumer needs fp16, it reads
   `x` itself. Casting back would be an FP16 -> FP32 -> FP16 round trip that
   changes no value; the author's Cast stays in the graph, untouched;
3. an author's Cast of the tensor to the needed type that already exists
   (reused, not duplicated);
4. a new Cast `<tensor>/cast_to_<fp16|fp32|bf16>`, placed right after the
   tensor's producer.

With `keep_io_types`, a graph output produced in another type keeps its name
and type: the producer writes `<output>/<type>` and a Cast writes the output.
Every Cast added, reused or looked through is reported with its consumers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import helper

from trtpipe.onnxmodel.domains import DEFAULT_DOMAINS
from trtpipe.precision.network.element_types import LOW_PRECISION, RETYPABLE, is_lossless, short_name
from trtpipe.precision.network.graph_index import GraphIndex, UniqueNames
from trtpipe.precision.materialize.node_types import NodeTypes, Requirement, exactly

BEFORE_ALL_NODES = -1
NOT_A_NODE = -2  # the consumer position of a read no node of this graph makes (a Loop/Scan body's)


@dataclass
class PlacedCasts:
    after: dict[int, list[onnx.NodeProto]] = field(default_factory=dict)  # position -> new nodes
    output_types: dict[str, int] = field(default_factory=dict)
    casts_added: list[dict] = field(default_factory=list)
    casts_reused: list[dict] = field(default_factory=list)
    casts_looked_through: list[dict] = field(default_factory=list)
    kept_fp32_inputs: list[dict] = field(default_factory=list)


class BoundaryCasts:
    """Serves every consumer of every float tensor; edits node inputs of `graph` in place."""

    def __init__(
        self,
        graph: onnx.GraphProto,
        index: GraphIndex,
        decided: list[NodeTypes],
        available: dict[str, dict[int, str]],
        types: dict[str, int],
        names: UniqueNames,
    ) -> None:
        self.graph, self.index, self.decided = graph, index, decided
        self.available, self.types, self.names = available, types, names
        self.placed = PlacedCasts()
        # Cast node position -> (name, type) it actually reads, once its input has been served.
        self._cast_reads: dict[int, tuple[str, int]] = {}
        self._cast_source = {
            position: node.input[0]
            for position, node in enumerate(graph.node)
            if _is_cast(node) and node.input and node.input[0] in available
        }
        # Cast output name -> its report entry (added or reused), to list every consumer it serves.
        self._entry_of_cast_output: dict[str, dict] = {}

    def place(self, keep_io_types: bool) -> PlacedCasts:
        self._type_graph_outputs(keep_io_types)
        for tensor in self.available:
            for position, slot in self.index.consumers.get(tensor, ()):
                requirement = self.decided[position].inputs[slot]
                if requirement is None:
                    continue
                node = self.graph.node[position]
                name, elem_type = self._serve(tensor, requirement, node.name, position)
                node.input[slot] = name
                if position in self._cast_source and slot == 0:
                    self._cast_reads[position] = (name, elem_type)
                self._note_kept_input(position, slot, tensor, requirement, elem_type)
        # Reads inside bodies (index.implicit) are served by the bodies themselves, from what
        # this scope holds (materialize.py), so one Cast here serves no body that needs none;
        # except reads from Loop/Scan bodies, which `serve_loop_reads` converts here once.
        return self.placed

    def serve_loop_reads(self, per_step: dict[str, list[tuple[int, str]]]) -> None:
        """Make every tensor of this graph that a Loop/Scan body reads (body_demands.py `per_step`)
        available here in each type the body needs, so the body reads it from outer scope as it
        is: a Cast inside the body would convert the same loop-invariant value on every step.

        Served like a consumer of this graph (an available type, a lossless Cast looked through,
        an author's Cast, else a new Cast right after the producer); tensors of enclosing scopes
        were served by the scope that holds them."""
        for tensor, needs in per_step.items():
            if tensor not in self.available or not self._is_local(tensor):
                continue
            for elem_type, reader in needs:
                name, _ = self._serve(tensor, exactly(elem_type), reader, NOT_A_NODE)
                self.available[tensor].setdefault(elem_type, name)

    def _is_local(self, tensor: str) -> bool:
        index = self.index
        return tensor in index.producer or tensor in index.graph_inputs or tensor in index.initializers

    def outputs_in_declared_types(self) -> None:
        """A body output this body does not produce (an outer-scope tensor, a body input) is
        output under the name that holds its declared type, cast at the end of the body if none does."""
        for output in self.graph.output:
            tensor = output.name
            if tensor in self.index.producer or tensor not in self.available:
                continue
            declared = self.types[tensor]
            if declared not in self.available[tensor]:
                produced, source = next(iter(self.available[tensor].items()))
                name = self.names.claim(f"{tensor}/cast_to_{short_name(declared)}")
                self._new_cast(tensor, source, produced, declared, output=name, after=len(self.graph.node) - 1)
                self.available[tensor][declared] = name
                self._entry_of_cast_output[name]["consumers"].append(f"body output {tensor}")
            output.name = self.available[tensor][declared]

    def _type_graph_outputs(self, keep_io_types: bool) -> None:
        for output in self.graph.output:
            tensor = output.name
            if tensor not in self.available:
                continue
            produced = next(iter(self.available[tensor]))
            authored = self.types[tensor]
            if not keep_io_types or produced == authored:
                self.placed.output_types[tensor] = produced
                continue
            if tensor in self.index.producer and authored not in self.available[tensor]:
                self._cast_into_graph_output(tensor, produced, authored)
            self.placed.output_types[tensor] = authored

    def _cast_into_graph_output(self, tensor: str, produced: int, authored: int) -> None:
        """The producer writes `<output>/<type>`; a new Cast writes the output under its own name."""
        position, slot = self.index.producer[tensor]
        internal = self.names.claim(f"{tensor}/{short_name(produced)}")
        self.graph.node[position].output[slot] = internal
        self.available[tensor] = {produced: internal, authored: tensor}
        self._new_cast(tensor, internal, produced, authored, output=tensor, after=position)
        self._entry_of_cast_output[tensor]["consumers"].append(f"graph output {tensor}")

    def _serve(self, tensor: str, requirement: Requirement, consumer: str, position: int) -> tuple[str, int]:
        """The name to read `tensor` under so that `consumer` (at `position`) gets an accepted type."""
        for elem_type, name in self.available[tensor].items():
            if elem_type in requirement.accepted:
                entry = self._entry_of_cast_output.get(name)
                if entry is not None and entry["tensor"] == tensor:
                    entry["consumers"].append(consumer)
                return name, elem_type
        target = requirement.cast_to
        source = self._lossless_source(tensor, target)
        if source is not None:
            if source in self._entry_of_cast_output:
                self._entry_of_cast_output[source]["consumers"].append(consumer)
            reason = f"{tensor} is a lossless Cast of {source}, which is already {short_name(target)}"
            self.placed.casts_looked_through.append(
                {"consumer": consumer, "tensor": tensor, "reads": source, "type": short_name(target),
                 "reason": reason}
            )
            return source, target
        existing = self._authors_cast(tensor, target, besides=position)
        if existing is not None:
            reused = existing.output[0]
            self.available[tensor][target] = reused
            entry = {"cast": existing.name, "tensor": tensor, "to": short_name(target),
                     "consumers": [consumer]}
            self.placed.casts_reused.append(entry)
            self._entry_of_cast_output[reused] = entry
            return reused, target
        produced, source_name = next(iter(self.available[tensor].items()))
        position = self.index.producer.get(tensor, (BEFORE_ALL_NODES, 0))[0]
        output = self.names.claim(f"{tensor}/cast_to_{short_name(target)}")
        self._new_cast(tensor, source_name, produced, target, output=output, after=position)
        self.available[tensor][target] = output
        self._entry_of_cast_output[output]["consumers"].append(consumer)
        return output, target

    def _new_cast(self, tensor, source, from_type, to_type, *, output, after) -> None:
        name = self.names.claim(f"{tensor}/cast_to_{short_name(to_type)}") if output == tensor else output
        cast = helper.make_node("Cast", [source], [output], name=name, to=to_type)
        self.placed.after.setdefault(after, []).append(cast)
        entry = {"name": name, "tensor": tensor, "from": short_name(from_type), "to": short_name(to_type),
                 "consumers": []}
        self.placed.casts_added.append(entry)
        self._entry_of_cast_output[output] = entry

    def _lossless_source(self, tensor: str, target: int) -> str | None:
        """Walk up the author's value-preserving Casts to a tensor already available in `target`.

        Tensors are served in topological order, so the Cast's own input has
        been served already and `_cast_reads` says what it really reads.
        """
        current = tensor
        while True:
            position = self._producing_cast(current)
            if position is None or position not in self._cast_reads:
                return None
            read_name, read_type = self._cast_reads[position]
            if not is_lossless(read_type, _cast_target(self.graph.node[position])):
                return None
            if read_type == target:
                return read_name
            source = self._cast_source[position]
            if read_name != next(iter(self.available[source].values())):
                return None  # it reads a converted copy: the source's other types hold other values
            if target in self.available[source]:
                return self.available[source][target]
            current = source

    def _producing_cast(self, tensor: str) -> int | None:
        producer = self.index.producer.get(tensor)
        if producer is None or producer[0] not in self._cast_source:
            return None
        return producer[0]

    def _authors_cast(self, tensor: str, target: int, besides: int) -> onnx.NodeProto | None:
        """An author's Cast of `tensor` to `target`, other than the consumer itself (a kept no-op Cast)."""
        for position, _ in self.index.consumers.get(tensor, ()):
            node = self.graph.node[position]
            if position != besides and _is_cast(node) and _cast_target(node) == target:
                return node
        return None

    def _note_kept_input(self, position, slot, tensor, requirement: Requirement, elem_type) -> None:
        target = self.decided[position].target
        if requirement.reason and target in LOW_PRECISION and elem_type != target:
            self.placed.kept_fp32_inputs.append(
                {"node": self.graph.node[position].name, "input": slot, "tensor": tensor,
                 "type": short_name(elem_type), "reason": requirement.reason}
            )


def _is_cast(node: onnx.NodeProto) -> bool:
    return node.op_type == "Cast" and node.domain in DEFAULT_DOMAINS


def _cast_target(cast: onnx.NodeProto) -> int | None:
    return next((attribute.i for attribute in cast.attribute if attribute.name == "to"), None)


def available_by_type(
    graph: onnx.GraphProto, decided: list[NodeTypes], weights_available: dict[str, dict[int, str]]
) -> dict[str, dict[int, str]]:
    """Every managed float tensor -> {type it is available in: name}; graph inputs and weights first."""
    available = {name: dict(by_type) for name, by_type in weights_available.items()}
    for position, node in enumerate(graph.node):
        for slot, name in enumerate(node.output):
            produced = decided[position].outputs[slot]
            if name and produced in RETYPABLE and name not in available:
                available[name] = {produced: name}
    return available
