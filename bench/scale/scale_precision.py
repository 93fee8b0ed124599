"""Time of the precision stage on long and wide graphs (issue 21, item 9): is it linear?

    cd /work/main && python -m bench.scale.scale_precision                       # ~1-2 min
    python -m bench.scale.scale_precision --sizes 1250 2500 --shapes chain      # a part
    python -m bench.scale.scale_precision --profile 20000 --shapes wide         # cProfile of one run

For each shape and size, builds the model (random weights, seeded), writes it, and
calls the precision stage class (`PlanPrecision.run`) directly on the file with the
configuration the CLI composes for `model.path=...` (the default precision config:
FP16, automatic rules, fewest Casts), in this process, without the cache. Prints
seconds and microseconds per node of that call, and the plan's FP32 node and Cast
counts (the same figures before and after a speed-up: the plan must not change).

Shapes (n = the node count asked for; the built graph has n nodes, within a few):
- `chain`: Relu, Neg, Relu, ... one after the other: one path of n cheap nodes, FP32
  input and output (`keep_io_types`), all of it one component of the minimum cut;
- `islands`: the chain with, every 25 nodes, a MatMul (FP16, fixed) and a Mul by
  1e4 then 1e-4 (its output exceeds `auto.max_abs`: FP32 by evidence), so the minimum
  cut has real work: where to put the Casts around each FP32 island;
- `wide`: the input read by n/5 parallel branches (Relu, MatMul, Neg, Relu), summed
  pairwise by a balanced tree of Adds: wide (every branch reads the same tensor)
  and shallow (depth ~log n).

Decision: in-process calls of the stage class, not the CLI: the CLI adds interpreter
start, Hydra and hashing, which are not what grows with the node count here. Each size
is a fresh model and a fresh stage object; `gc.collect()` between runs.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIZES = (1250, 2500, 5000, 10000, 20000)
SHAPES = ("chain", "islands", "wide")
WIDTH = 16
ISLAND_EVERY = 25


def chain_model(n: int) -> onnx.ModelProto:
    nodes, previous = [], "x"
    for index in range(n):
        output = f"t{index}"
        nodes.append(helper.make_node("Relu" if index % 2 == 0 else "Neg", [previous], [output], name=f"n{index}"))
        previous = output
    return _model(nodes, [], previous)


def islands_model(n: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, weights, previous = [], _scales(), "x"
    index = 0
    while len(nodes) < n:
        output = f"t{index}"
        position = index % ISLAND_EVERY
        if position == 0:
            weight = f"w{index}"
            weights.append(numpy_helper.from_array(_weight(rng), weight))
            nodes.append(helper.make_node("MatMul", [previous, weight], [output], name=f"n{index}"))
        elif position == ISLAND_EVERY // 2:
            nodes.append(helper.make_node("Mul", [previous, "up"], [output], name=f"n{index}"))
        elif position == ISLAND_EVERY // 2 + 1:
            nodes.append(helper.make_node("Mul", [previous, "down"], [output], name=f"n{index}"))
        else:
            nodes.append(helper.make_node("Abs" if index % 2 else "Neg", [previous], [output], name=f"n{index}"))
        previous = output
        index += 1
    return _model(nodes, weights, previous)


def wide_model(n: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    branches = max(n // 7, 1)  # 6 nodes per branch + one Add per branch (the tree has branches - 1)
    nodes, weights, tails = [], _scales(), []
    for branch in range(branches):
        weight = f"w{branch}"
        weights.append(numpy_helper.from_array(_weight(rng), weight))
        names = [f"b{branch}_{step}" for step in range(6)]
        nodes += [helper.make_node("Relu", ["x"], [names[0]], name=names[0]),
                  helper.make_node("MatMul", [names[0], weight], [names[1]], name=names[1]),
                  helper.make_node("Mul", [names[1], "up"], [names[2]], name=names[2]),
                  helper.make_node("Neg", [names[2]], [names[3]], name=names[3]),
                  helper.make_node("Mul", [names[3], "down"], [names[4]], name=names[4]),
                  helper.make_node("Relu", [names[4]], [names[5]], name=names[5])]
        tails.append(names[5])
    level = 0
    while len(tails) > 1:  # a balanced tree of Adds: depth log2(branches)
        merged = []
        for pair in range(0, len(tails) - 1, 2):
            name = f"add{level}_{pair // 2}"
            nodes.append(helper.make_node("Add", [tails[pair], tails[pair + 1]], [name], name=name))
            merged.append(name)
        if len(tails) % 2:
            merged.append(tails[-1])
        tails, level = merged, level + 1
    return _model(nodes, weights, tails[0])


def _scales() -> list:
    """Mul by `up` gives values over `auto.max_abs` (FP32 by evidence), `down` brings them back."""
    return [numpy_helper.from_array(np.array(1e4, np.float32), "up"),
            numpy_helper.from_array(np.array(1e-4, np.float32), "down")]


def _weight(rng) -> np.ndarray:
    """An orthogonal matrix: a long chain of them neither explodes nor vanishes."""
    q, _ = np.linalg.qr(rng.standard_normal((WIDTH, WIDTH)))
    return q.astype(np.float32)


def _model(nodes, weights, last: str) -> onnx.ModelProto:
    nodes[-1].output[0] = "y"
    for node in nodes:  # the last tensor is the graph output `y`
        for position, name in enumerate(node.input):
            if name == last:
                node.input[position] = "y"
    graph = helper.make_graph(nodes, "scale_precision", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


BUILDERS = {"chain": chain_model, "islands": islands_model, "wide": wide_model}


def precision_seconds(path: Path, out_dir: Path) -> tuple[float, dict]:
    """One call of the precision stage on `path` with the CLI's default precision config."""
    from omegaconf import OmegaConf

    from trtpipe.api import compose
    from trtpipe.data import resolved_data
    from trtpipe.stages import stage_class

    cfg = compose([f"model.path={path}", "stages=[precision]"])
    stage = stage_class("precision")
    config = OmegaConf.to_container(cfg["precision"], resolve=True)
    config["data"] = resolved_data(cfg.data, None, Path.cwd())
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    stage().run({"model": path}, config, out_dir)
    seconds = time.perf_counter() - started
    return seconds, json.loads((out_dir / "precision_plan.json").read_text())


def measure(shape: str, size: int, work: Path, profile: bool = False) -> dict:
    model = BUILDERS[shape](size)
    path = work / f"{shape}_{size}.onnx"
    onnx.save(model, path)
    gc.collect()
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    seconds, plan = precision_seconds(path, work / f"{shape}_{size}")
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    nodes = len(model.graph.node)
    fp32 = sum(1 for node in plan["nodes"] if node["precision"] == "fp32")
    casts = plan["totals"].get("casts_added", plan.get("fewest_casts", {}).get("casts_after"))
    return {"shape": shape, "nodes": nodes, "seconds": seconds, "us_per_node": seconds / nodes * 1e6,
            "fp32_nodes": fp32, "casts": casts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--profile", type=int, metavar="SIZE", help="cProfile the run of this size")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    rows = []
    print(f"{'shape':8s} {'nodes':>7s} {'seconds':>8s} {'us/node':>8s} {'FP32':>6s} {'Casts':>6s}")
    with tempfile.TemporaryDirectory(prefix="trtpipe_scale_precision_") as scratch:
        for shape in args.shapes:
            for size in args.sizes:
                row = measure(shape, size, Path(scratch), profile=size == args.profile)
                rows.append(row)
                print(f"{row['shape']:8s} {row['nodes']:7d} {row['seconds']:8.2f} {row['us_per_node']:8.0f} "
                      f"{row['fp32_nodes']:6d} {row['casts']!s:>6s}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
