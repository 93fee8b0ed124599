"""Issue 21, item 9: the fewest-Casts cut is exact and linear on long graphs.

The reference is a brute force over every labelling of the movable nodes, priced by the
plan's own Cast count (`_CutProblem.casts`, which adds up Casts per tensor without any
flow graph): fewest Casts, then fewest nodes moved to FP32. The long graphs are real ONNX
chains of 20,000 nodes; their bound is on the work the cut does (edges looked at), not on
seconds.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtpipe.precision.cut import fewest_casts as fewest
from trtpipe.precision.network.decisions import Decision
from trtpipe.precision.network.network import name_nodes_as_parser_does, network_from_model

WIDTH = 4
UNARY, BINARY = ("Relu", "Neg", "Abs", "Sigmoid"), ("Add", "Mul", "Sub")


def _random_case(seed: int):
    """A random DAG of float nodes (unary, binary, MatMul, Cast), random fixed and movable decisions."""
    rng = random.Random(seed)
    half = rng.random() < 0.3  # an FP16 graph input: its type is a label of its own
    inputs = [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [WIDTH, WIDTH])]
    if rng.random() < 0.5:
        inputs.append(helper.make_tensor_value_info("x1", TensorProto.FLOAT16 if half else TensorProto.FLOAT,
                                                    [WIDTH, WIDTH]))
    tensors = [i.name for i in inputs]
    nodes, weights, casts_to = [], [], {}
    for index in range(rng.randint(3, 11)):
        name, kind = f"n{index}", rng.random()
        output = f"t{index}"
        if kind < 0.12:
            weight = numpy_helper.from_array(np.eye(WIDTH, dtype=np.float32), f"w{index}")
            weights.append(weight)
            node = helper.make_node("MatMul", [rng.choice(tensors), weight.name], [output], name=name)
        elif kind < 0.22:
            to = rng.choice([TensorProto.FLOAT, TensorProto.FLOAT16])
            node = helper.make_node("Cast", [rng.choice(tensors)], [output], name=name, to=to)
            casts_to[name] = to
        elif kind < 0.55:
            node = helper.make_node(rng.choice(BINARY), [rng.choice(tensors), rng.choice(tensors)], [output], name=name)
        else:
            node = helper.make_node(rng.choice(UNARY), [rng.choice(tensors)], [output], name=name)
        nodes.append(node)
        tensors.append(output)
    read = {t for n in nodes for t in n.input}
    produced = [n.output[0] for n in nodes]
    outputs = [t for t in produced if t not in read or rng.random() < 0.2] or [produced[-1]]
    if half:  # a binary op cannot mix FLOAT and FLOAT16 inputs: give x1 its own Cast reader
        nodes.insert(0, helper.make_node("Cast", ["x1"], ["x1_wide"], name="widen", to=TensorProto.FLOAT))
        casts_to["widen"] = TensorProto.FLOAT
        for node in nodes[1:]:
            node.input[:] = ["x1_wide" if t == "x1" else t for t in node.input]
    graph = helper.make_graph(nodes, f"random{seed}", inputs, [], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v for v in model.graph.value_info}
    model.graph.output.extend(types[t] for t in outputs)
    name_nodes_as_parser_does(model)
    net = network_from_model(model)
    decisions = {}
    for name in net.names:
        if net.op_type(name) == "Cast":
            decisions[name] = Decision("keep", "authored Cast", "authored")
            continue
        roll = rng.random()
        if roll < 0.55:
            decisions[name] = Decision("fp16", "default")
        elif roll < 0.8:
            decisions[name] = Decision("fp32", "evidence", "auto")
        else:
            decisions[name] = Decision("fp16", "rule", "rule")
    return net, decisions, rng.random() < 0.7


def _brute_force(net, decisions, keep_io_types) -> tuple[list[str], int, int]:
    """Every labelling of the movable nodes: the fewest Casts, then the fewest moved (asserted unique)."""
    read_in_bodies = net.tensors_read_in_bodies()
    movable = [n for n in net.names if fewest._movable(net, decisions, n)
               and not any(t in read_in_bodies for t in net.nodes[n].output)]
    problem = fewest._CutProblem(net, decisions, dict.fromkeys(movable), keep_io_types)
    scored = []
    for labels in itertools.product((fewest.LOW, fewest.FP32), repeat=len(movable)):
        moved = [n for n, label in zip(movable, labels) if label == fewest.FP32]
        scored.append((problem.casts({n: fewest.FP32 for n in moved}), len(moved), moved))
    scored.sort(key=lambda item: item[:2])
    best = [item for item in scored if item[:2] == scored[0][:2]]
    assert len(best) == 1, f"two plans with the fewest Casts and the fewest moved nodes: {best}"
    return best[0][2], best[0][0], problem.casts({})


@pytest.mark.parametrize("seed", range(150))
def test_the_cut_equals_the_brute_force_plan_on_random_graphs(seed):
    net, decisions, keep_io_types = _random_case(seed)
    expected, casts, before = _brute_force(net, decisions, keep_io_types)
    record = fewest.fewest_casts(net, dict(decisions), keep_io_types)
    if casts < before:
        assert record == {"casts_before": before, "casts_after": casts, "moved": expected}
    else:  # nothing to gain: the plan stays as it is
        assert record == {"casts_before": before, "casts_after": before, "moved": []}


def test_the_random_graphs_exercise_the_cut():
    """The brute-force test is not vacuous: many cases move nodes, many keep Casts that cannot go."""
    outcomes = [_brute_force(*_random_case(seed)) for seed in range(150)]
    assert sum(1 for moved, casts, before in outcomes if moved and casts < before) >= 20
    assert sum(1 for moved, casts, before in outcomes if casts > 0) >= 40


def _chain(length: int, island_every: int | None = None):
    """Relu/Neg one after the other; with `island_every`, a MatMul (fixed FP16) every so many nodes and,
    half-way between, two nodes planned FP32 by evidence, three apart: one long component with real flow."""
    nodes, weights, previous = [], [], "x"
    for index in range(length):
        output = "y" if index == length - 1 else f"t{index}"
        if island_every and index % island_every == 0:
            weights.append(numpy_helper.from_array(np.eye(WIDTH, dtype=np.float32), f"w{index}"))
            nodes.append(helper.make_node("MatMul", [previous, f"w{index}"], [output], name=f"n{index}"))
        else:
            nodes.append(helper.make_node("Relu" if index % 2 else "Neg", [previous], [output], name=f"n{index}"))
        previous = output
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])], weights)
    net = network_from_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    decisions = {name: Decision("fp16", "default") for name in net.names}
    if island_every:
        for start in range(island_every // 2, length, island_every):
            decisions[f"n{start}"] = decisions[f"n{start + 3}"] = Decision("fp32", "evidence", "auto")
    return net, decisions


def _solved(net, decisions):
    movable = dict.fromkeys(n for n in net.names if fewest._movable(net, decisions, n))
    problem = fewest._CutProblem(net, decisions, movable, True)
    moved = problem.solve()
    edges = sum(2 + len(needs) for _, needs in problem.tensors)  # per tensor: its two Cast edges, its readers
    return problem, moved, edges


def test_a_20000_node_chain_is_solved_with_linear_work():
    """FP32 input and output around 20,000 cheap nodes: all of them join FP32 (Casts 2 -> 0). The
    weighted tie-break this replaced needed ~n/2 phases of O(n) each here (307 s at 10,000 nodes)."""
    net, decisions = _chain(20_000)
    problem, moved, edges = _solved(net, decisions)
    assert moved == net.names
    assert problem.casts({n: fewest.FP32 for n in moved}) == 0
    assert problem.scans <= 10 * edges, (problem.phases, problem.scans, edges)


@pytest.mark.parametrize("every", [40, 20_000])
def test_a_20000_node_chain_with_fp32_islands_is_solved_with_linear_work(every):
    """A MatMul every `every` nodes, two FP32 nodes three apart half-way between: the two cheap nodes
    between them join FP32 (2 Casts fewer per island); between an island and a MatMul either side costs
    one Cast (tie: nothing moves); after the last island the chain joins the FP32 output. With one
    island (every=20,000) the flow runs along paths 10,000 nodes long."""
    net, decisions = _chain(20_000, island_every=every)
    problem, moved, edges = _solved(net, decisions)
    assert problem.scans <= 10 * edges, (problem.phases, problem.scans, edges)
    last_fp32 = 20_000 - every + every // 2 + 3
    expected = [f"n{i}" for i in range(20_000) if i % every in (every // 2 + 1, every // 2 + 2) or i > last_fp32]
    assert moved == expected
