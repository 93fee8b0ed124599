"""The search: the smallest window of the candidate that still breaks the run's bound on its own.

Every trial is real: the window is written as a model (subgraph.py), its inputs are the FP32
reference's values at the cut (stored in the candidate's type of each tensor: an FP16 tensor of the
plan gets the reference value rounded to FP16), it runs on trtpipe's FP16 emulation (the candidate
of validate), and its output is judged against the reference's value of the same tensor with the
failing output's tolerance, the same way (failing_run.FailingRun.fails_the_same_way). Upstream error is removed by construction,
so a window that fails, fails by its own nodes.

Steps (each decision and its reason):
1. Ends: the tensors of the full emulated run that break the bound that way against the reference
   (the failing graph output is one of them). They are tried from localisation's origins on (the
   run's validation.json, where error enters the graph): first the ends downstream of the first
   origin, nearest first, then of the next origin, then any other end. Why anchored: an
   intermediate can break the bound without being why the output fails (the built-in
   transformer's attention-mask Mul, -3.4e38 saturated to FP16's -65504: off by 100%, and harmless
   after the Softmax, which localisation knows and the bound alone does not).
2. For an end, windows grow backwards from its producer: the ancestors of the end at or after
   position k, for k over the ancestors' positions from the latest down (so each trial adds one
   node). The first window that breaks the bound is the smallest such suffix. A window whose cut
   holds a tensor the reference does not expose (an integer shape path) or whose reference value
   does not fit the candidate's type (an FP16 input that would be inf: the failure would be in the
   input, not the window) is not a reproduction and is skipped.
3. Then each node of that window but the end's producer is removed in turn (its outputs become
   inputs fed from the reference) and stays removed if the window still breaks the bound:
   no node is left whose removal keeps the failure (1-minimal, as delta debugging's result).
4. `max_trials` bounds the work; the best window found so far is the answer (the whole model, fed
   with the real inputs, breaks the bound by definition).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trtpipe.reduce.failing_run import FailingRun
from trtpipe.reduce.subgraph import node_reads, window_model, window_nodes

MAX_ENDS = 12


@dataclass
class Reduced:
    model: object  # onnx.ModelProto
    inputs: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]  # the FP32 reference's value of the output
    output: str
    broken: list[str]
    metrics: dict
    trials: int
    positions: list[int] = field(default_factory=list)  # in the candidate's main graph
    nodes: list[dict] = field(default_factory=list)


class Reducer:
    def __init__(self, run: FailingRun, max_trials: int = 400) -> None:
        from trtpipe.numerics.emulator import EmulatedRunner
        from trtpipe.numerics.reference import ReferenceRunner

        self.run = run
        self.max_trials = max_trials
        self.trials = 0
        self.reference = {**run.feeds, **ReferenceRunner(run.reference, expose_intermediates=True).run(run.feeds)}
        emulated = EmulatedRunner(run.candidate, expose_intermediates=True)
        self.emulated = emulated.run(run.feeds)
        self.precisions = emulated.precisions
        self.nodes = list(run.candidate.graph.node)
        self.producer = {out: i for i, node in enumerate(self.nodes) for out in node.output if out}
        self.weights = {t.name for t in run.candidate.graph.initializer}
        # A Cast the precision stage inserted has no reference tensor of its name: its value is its source's.
        self.cast_source = {node.output[0]: node.input[0] for node in self.nodes if node.op_type == "Cast"}

    def reference_value(self, name: str) -> np.ndarray | None:
        seen = set()
        while name not in self.reference and name in self.cast_source and name not in seen:
            seen.add(name)
            name = self.cast_source[name]
        return self.reference.get(name)

    def cut_value(self, name: str) -> np.ndarray | None:
        """The reference's value in the candidate's type of `name`; None when it is not a reproduction."""
        if name in self.run.feeds:
            return self.run.feeds[name]
        value = self.reference_value(name)
        if value is None:
            return None
        precision = self.precisions.get(name, "fp32")
        dtype = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}.get(precision)
        if dtype is None or value.dtype.kind != "f":
            return None
        with np.errstate(over="ignore"):  # an overflow is detected just below
            typed = value.astype(dtype)
        if np.any(np.isfinite(value) & ~np.isfinite(typed)):
            return None  # the reference does not fit: the failure would be the input's
        return typed

    def _ends(self) -> list[str]:
        from trtpipe.numerics.metrics import output_metrics

        ends = []
        for node in self.nodes:
            for out in node.output:
                ref, cand = self.reference_value(out), self.emulated.get(out)
                if (ref is None or cand is None or ref.shape != cand.shape or ref.dtype.kind != "f"
                        or self.run.fails_the_same_way(output_metrics(ref, cand)) is None):
                    continue
                ends.append(out)
        return _anchored(ends, self._origin_descendants(), self.producer, self.run.output)

    def _origin_descendants(self) -> list[set[int]]:
        """For each localisation origin (a candidate node name), the positions of it and every node downstream."""
        by_name = {node.name: i for i, node in enumerate(self.nodes) if node.name}
        readers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for name in node_reads(node):
                readers.setdefault(name, []).append(i)
        found = []
        for origin in self.run.origins:
            if origin not in by_name:
                continue
            reached, stack = set(), [by_name[origin]]
            while stack:
                position = stack.pop()
                if position not in reached:
                    reached.add(position)
                    stack.extend(r for out in self.nodes[position].output for r in readers.get(out, ()))
            found.append(reached)
        return found

    def _try(self, end: str, allowed: set[int]) -> Reduced | None:
        from trtpipe.numerics.emulator import EmulatedRunner
        from trtpipe.numerics.metrics import output_metrics

        positions, cut = window_nodes(self.nodes, self.producer, end, allowed)
        inputs = {}
        for name in cut:
            if name in self.weights:
                continue
            value = self.cut_value(name)
            if value is None:
                return None
            inputs[name] = value
        self.trials += 1
        reference = self.reference_value(end)
        model = window_model(self.run.candidate, positions, inputs, end, self.precisions.get(end, "fp32"),
                             list(reference.shape))
        try:
            produced = EmulatedRunner(model).run(inputs)[end]
        except Exception:  # noqa: BLE001 - a window ONNX Runtime refuses is not a reproduction
            return None
        metrics = output_metrics(reference, produced)
        broken = self.run.fails_the_same_way(metrics)
        if broken is None:
            return None
        return Reduced(model, inputs, {end: reference.astype(np.float32)}, end, broken,
                       _json_metrics(metrics), self.trials, positions,
                       [{"name": self.nodes[p].name, "op_type": self.nodes[p].op_type,
                         "precision": self.precisions.get(self.nodes[p].output[0], "?")} for p in positions])

    def reduce(self) -> Reduced:
        every = set(range(len(self.nodes)))
        for end in self._ends():
            if self.trials >= self.max_trials:
                break
            positions, _cut = window_nodes(self.nodes, self.producer, end, every)
            found = None
            for k in sorted(positions, reverse=True):
                found = self._try(end, {p for p in positions if p >= k})
                if found is not None or self.trials >= self.max_trials:
                    break
            if found is None:
                continue
            return self._minimal(end, found)
        whole = self._try(self.run.output, every)
        if whole is None:  # the graph output broke the bound with these inputs in failing_run
            raise RuntimeError(f"the whole candidate does not break {self.run.bound} on {self.run.output} again")
        return whole

    def _minimal(self, end: str, found: Reduced) -> Reduced:
        kept, last = set(found.positions), self.producer[end]
        for position in sorted(found.positions):
            if position == last or position not in kept or self.trials >= self.max_trials:
                continue
            smaller = self._try(end, kept - {position})
            if smaller is not None:
                found, kept = smaller, set(smaller.positions)
        found.trials = self.trials
        return found


def _anchored(ends: list[str], regions: list[set[int]], producer: dict[str, int], output: str) -> list[str]:
    """`ends` (graph order) ordered by the first origin region holding their producer, the rest after;
    at most MAX_ENDS, the failing graph output always among them (the whole model is the last resort)."""
    ordered: list[str] = []
    for region in regions:
        ordered += [end for end in ends if producer[end] in region and end not in ordered]
    ordered += [end for end in ends if end not in ordered]
    chosen = [end for end in ordered if end != output][:MAX_ENDS - 1]
    return chosen + [output]


def _json_metrics(metrics) -> dict:
    from trtpipe.numerics.metrics import json_float

    return {key: json_float(value) if isinstance(value, float) else value for key, value in vars(metrics).items()}
