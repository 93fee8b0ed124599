"""When the node localisation names is FP32, where its error comes from.

An FP32 node rounds its own result by 2^-24: it cannot be the place where 1% of
error enters. When it is the first node above the threshold (or the first
non-finite one), it amplifies error that arrives from upstream: a `Sub` that
cancels two large FP16 values, an `Exp`, a division by a small difference.
Keeping it FP32 changes nothing; the user must protect what feeds it. So the
finding says the node is an amplifier and names the nearest upstream
low-precision nodes whose rounding feeds it, ranked by measured contribution.

Decisions:
- Candidates: from the amplifier's inputs, walk upstream through FP32 nodes and
  Casts (an FP32 region, the Casts the precision stage inserted at its border)
  to the first node on each path whose output is low precision (FP16/BF16);
  those are the nearest rounding points. At most `MAX_CANDIDATES`, nearest first
  (breadth first), and at most `MAX_WALK` nodes visited, so a large FP32 region
  costs a bounded walk.
- Contribution, measured on the FP32 reference run: the candidate's output
  tensor alone is replaced by its rounding to the candidate's precision
  (round to nearest even, as the emulation's storage rounding does) and the
  reference graph is run from there; the contribution is max |change| at the
  amplifier's output divided by the reference's max |x| there: the measure
  localisation judges by, so it reads against the threshold. Why this and not
  re-running the emulation with the candidate kept FP32: it isolates the
  candidate's own rounding, which is exactly what keeping that node FP32
  removes (the emulation computes an FP16 node in FP32 and rounds its output,
  emulated_graph.py), from the error its own inputs bring from further up
  (that error would be credited to it otherwise); and it needs no new plan,
  no re-materialised model: one reference session with the candidate tensors
  cut into inputs, one run per candidate.
- `explained`: all candidates rounded together, as a share of the error the
  amplifier actually has in the emulation. Below `EXPLAINED_ENOUGH` (half) the
  error comes from further up: the walk goes one low-precision level further
  (the low-precision producers feeding the nearest ones, `level` 2), measured the
  same way in a second cut session (cutting the nearest tensors too would stop
  the further rounding from reaching the amplifier), ranked with the nearest
  ones, and `explained_further` is their share together. What neither level
  explains (an FP16 LayerNormalization's internals, which one output rounding
  does not reproduce; error from three levels up) the report says is unexplained
  rather than blaming the nearest nodes.
- Candidate tensors without a reference counterpart (outputs of fused or
  inserted nodes) cannot be injected: they are listed as not measured.
- Ops that only move or convert values (`Cast`, `Reshape`, `Transpose`, ...:
  `MOVES_VALUES`) amplify nothing: an FP32 finding there (the Cast back to FP32
  at a graph output, whose FP16 input is a renamed tensor localisation cannot
  match) carries its input's error and gets no `amplifies` entry.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import onnx

from trtpipe.numerics.metrics import json_float
from trtpipe.numerics.ort_session import OrtSession
from trtpipe.numerics.rounding import round_to_bf16, round_to_fp16

LOW_PRECISION = {"fp16": round_to_fp16, "bf16": round_to_bf16}
FULL_PRECISION = ("fp32", "fp64")
MOVES_VALUES = frozenset({"Cast", "CastLike", "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                          "Expand", "Concat", "Slice", "Gather", "GatherElements", "Split", "Pad", "Tile",
                          "DepthToSpace", "SpaceToDepth"})
MAX_CANDIDATES = 6
MAX_EXPLAINED = 2  # FP32 finding nodes measured per localisation
EXPLAINED_ENOUGH = 0.5  # below: measure the next low-precision level up too
MAX_WALK = 200
SCALE_FLOOR = 1e-6
CUT_SUFFIX = "__trtpipe_cut"
METHOD = ("each nearest upstream low-precision tensor (level 1; level 2 above them when level 1 explains less "
          "than half) alone rounded to its precision on the FP32 reference run; contribution = max |change| at "
          "this node's output / its reference max |x| (what keeping that node FP32 removes)")


def upstream_candidates(candidate_model: onnx.ModelProto, tensor: str, precisions: dict[str, str],
                        levels: int = 1) -> list[tuple[onnx.NodeProto, str, int]]:
    """(node, output tensor, level) of the low-precision producers upstream of the node producing `tensor`:
    level 1 the nearest on each path (through FP32 nodes and Casts), level 2 the nearest above those, ..."""
    producer = {out: node for node in candidate_model.graph.node for out in node.output if out}
    start = producer.get(tensor)
    if start is None:
        return []
    found: list[tuple[onnx.NodeProto, str, int]] = []
    per_level: dict[int, int] = {}
    queue, seen, walked = deque((name, 1) for name in start.input), set(), 0
    while queue and walked < MAX_WALK:
        name, level = queue.popleft()
        node = producer.get(name)
        if not name or name in seen or node is None:
            continue
        seen.add(name)
        walked += 1
        precision = precisions.get(name)
        if node.op_type != "Cast" and precision in LOW_PRECISION:
            if per_level.get(level, 0) < MAX_CANDIDATES:
                per_level[level] = per_level.get(level, 0) + 1
                found.append((node, name, level))
            if level < levels:
                queue.extend((upstream, level + 1) for upstream in node.input)
        elif node.op_type == "Cast" or precision in FULL_PRECISION:
            queue.extend((upstream, level) for upstream in node.input)
    return found


def trace_upstream(finding: dict, reference_model: onnx.ModelProto, candidate_model: onnx.ModelProto,
                   feeds: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                   precisions: dict[str, str]) -> dict | None:
    """The `amplifies` entry for an FP32 finding (None for a low-precision one): its nearest upstream
    low-precision nodes ranked by measured contribution (module docstring)."""
    if (finding.get("precision") not in FULL_PRECISION or finding["tensor"] not in reference
            or finding.get("op_type") in MOVES_VALUES):
        return None
    nodes = upstream_candidates(candidate_model, finding["tensor"], precisions, levels=2)
    measurable = [(node, name, level) for node, name, level in nodes
                  if name in reference and np.asarray(reference[name]).dtype.kind == "f"]
    measured = {name for _, name, _ in measurable}
    entry = {"note": (f"{finding['node']} computes in {finding['precision']}: its own rounding is negligible, "
                      "it amplifies error arriving from upstream"),
             "method": METHOD, "upstream": [], "explained": None,
             "not_measured": [node.name for node, name, level in nodes if level == 1 and name not in measured]}
    actual = finding.get("cand_max_abs_error")
    actual = float(actual) if isinstance(actual, (int, float)) and actual > 0 else None
    probe = _Probe(reference_model, feeds, reference, precisions, finding["tensor"], actual)
    nearest = [(node, name) for node, name, level in measurable if level == 1]
    if nearest:
        entry["upstream"], entry["explained"] = probe.measure(nearest, level=1)
    further = [(node, name) for node, name, level in measurable if level == 2]
    explained = entry["explained"]
    if further and not (isinstance(explained, (int, float)) and explained >= EXPLAINED_ENOUGH):
        rows, entry["explained_further"] = probe.measure(further, level=2)
        entry["upstream"] += rows
    entry["upstream"].sort(key=lambda row: (-row["nonfinite"], -_number(row["contribution"])))
    return entry


class _Probe:
    """The reference graph cut at chosen tensors, run with each of them rounded (module docstring)."""

    def __init__(self, reference_model, feeds, reference, precisions, target: str, actual: float | None) -> None:
        self.model, self.feeds, self.reference, self.precisions = reference_model, feeds, reference, precisions
        self.target, self.actual = target, actual
        expected = np.asarray(reference[target], dtype=np.float64)
        self.scale = max(float(np.abs(expected[np.isfinite(expected)]).max(initial=0.0)), SCALE_FLOOR)  # as localize

    def measure(self, candidates: list[tuple[onnx.NodeProto, str]], level: int) -> tuple[list[dict], object]:
        """(one row per candidate, the share of the actual error all of them rounded together give)."""
        cut = {name: np.asarray(self.reference[name]).dtype for _, name in candidates}
        session = OrtSession(_cut_model(self.model, cut, self.target))
        inputs = {value.name for value in session.session.get_inputs()}
        exact = {**{k: v for k, v in self.feeds.items() if k in inputs}, **{n: self.reference[n] for n in cut}}
        base = session.run(exact)[self.target]
        rows = []
        for node, name in candidates:
            change, nonfinite = _change(session.run({**exact, name: self._rounded(name)})[self.target], base)
            rows.append({"node": node.name, "op_type": node.op_type, "tensor": name,
                         "precision": self.precisions[name], "level": level,
                         "contribution": json_float(change / self.scale), "nonfinite": nonfinite,
                         "share": json_float(change / self.actual) if self.actual else None})
        together, _ = _change(session.run({**exact, **{n: self._rounded(n) for n in cut}})[self.target], base)
        return rows, (json_float(together / self.actual) if self.actual else None)

    def _rounded(self, name: str) -> np.ndarray:
        array = np.asarray(self.reference[name])
        return LOW_PRECISION[self.precisions[name]](array.astype(np.float32)).astype(array.dtype)


def describe(entry: dict, limit: int = 3) -> str:
    """One line for the console: the amplifier and its ranked upstream origins."""
    rows = entry.get("upstream") or []
    if entry.get("error"):
        return f"{entry['note']}; {entry['error']}"
    if not rows:
        return f"{entry['note']}; no upstream low-precision node could be measured"
    named = ", ".join(f"{row['node']} ({row['op_type']}, {row['precision']}"
                      f"{', further up' if row.get('level', 1) > 1 else ''}) {_percent(row['contribution'])}"
                      for row in rows[:limit])
    text = f"{entry['note']}; nearest low-precision origins by measured contribution: {named}"
    explained = entry.get("explained")
    further = entry.get("explained_further")
    if isinstance(explained, (int, float)):
        text += f" (the nearest together {explained:.0%} of its error"
        if isinstance(further, (int, float)):
            text += f", the level above them {further:.0%}"
        elif explained < EXPLAINED_ENOUGH:
            text += "; the rest comes from further upstream"
        text += ")"
    return text


def _cut_model(model: onnx.ModelProto, cut: dict[str, np.dtype], target: str) -> onnx.ModelProto:
    """`model` with each tensor in `cut` an input of that element type (its producer writes an unused
    `<name>__trtpipe_cut` instead) and `target` the only output."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    for node in graph.node:
        for index, name in enumerate(node.output):
            if name in cut:
                node.output[index] = name + CUT_SUFFIX
    kept = [value for value in graph.value_info if value.name not in cut]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    for name, dtype in cut.items():
        value = graph.input.add(name=name)
        value.type.tensor_type.elem_type = onnx.helper.np_dtype_to_tensor_dtype(dtype)
    del graph.output[:]
    graph.output.append(onnx.ValueInfoProto(name=target))
    return copy



def _change(values: np.ndarray, base: np.ndarray) -> tuple[float, int]:
    values, base = np.asarray(values, dtype=np.float64), np.asarray(base, dtype=np.float64)
    finite = np.isfinite(base)
    broken = int((finite & ~np.isfinite(values)).sum())
    if broken:
        return float("inf"), broken
    with np.errstate(invalid="ignore"):
        difference = np.abs(values[finite] - base[finite])
    return (float(difference.max()) if difference.size else 0.0), 0


def _number(value) -> float:
    return float("inf") if value == "inf" else (float(value) if isinstance(value, (int, float)) else 0.0)


def _percent(value) -> str:
    return "inf" if value == "inf" else f"{_number(value):.2%}"


def explain_amplifiers(findings: list[dict], reference_model: onnx.ModelProto, candidate_model: onnx.ModelProto,
                       feeds: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                       precisions: dict[str, str]) -> None:
    """Add `amplifies` (trace_upstream) to FP32 findings, in place, measured once per node and for the
    first `MAX_EXPLAINED` such nodes in `findings`' order (the first findings come first: a model with
    many independent FP32 origins costs two measurements, not one each); its reason then names the
    top origin."""
    measured: dict[str, dict | None] = {}
    for finding in findings:
        if not finding or finding.get("precision") not in FULL_PRECISION:
            continue
        if finding["node"] not in measured and len(measured) >= MAX_EXPLAINED:
            continue
        if finding["node"] not in measured:
            try:
                measured[finding["node"]] = trace_upstream(finding, reference_model, candidate_model, feeds,
                                                           reference, precisions)
            except Exception as error:  # noqa: BLE001 - trtpipe's own cut graph: an explanation never fails a run
                measured[finding["node"]] = {
                    "note": f"{finding['node']} computes in {finding['precision']}: it amplifies upstream error",
                    "method": METHOD, "upstream": [], "explained": None, "not_measured": [],
                    "error": f"trtpipe's graph measuring the upstream contributions failed: "
                             f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}
        entry = measured[finding["node"]]
        if entry is None or "amplifies" in finding:
            continue
        finding["amplifies"] = entry
        top = (entry["upstream"] or [None])[0]
        finding["reason"] += "; an FP32 amplifier of upstream error" + (
            f", nearest origin by measured contribution: {top['node']} ({top['op_type']}, {top['precision']})"
            if top else "")
