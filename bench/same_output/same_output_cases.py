"""The graphs bench/same_output/same_output.py runs each stage on (see its docstring): LayerNorm forms and their
mutations, shuffled node orders, fuzz_graphs' mutated graphs (deterministic draws) and a small graph
of Constant nodes and Shape -> Gather/Slice folds for the mutations to start from."""

from __future__ import annotations


def drawn_models(count: int, base=None) -> list[bytes]:
    """`count` deterministic draws of bench/fuzz/fuzz_graphs.py's mutated models (duplicates dropped), mutating
    `base()` instead of the fuzzer's own base graph when given."""
    if count <= 0:
        return []
    from hypothesis import HealthCheck, given, settings

    from bench.fuzz import fuzz_graphs

    drawn: list[bytes] = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(fuzz_graphs.mutated_models())
    def collect(model_bytes):
        drawn.append(model_bytes)

    original = fuzz_graphs.base_model
    if base is not None:
        fuzz_graphs.base_model = base
    try:
        collect()
    finally:
        fuzz_graphs.base_model = original
    return list(dict.fromkeys(drawn))


def layernorm_forms() -> list[tuple[str, object]]:
    """Every LayerNorm form of tests/graph, named."""
    from tests.graph import graphs
    from tests.graph.layernorm_forms import FORMS, layernorm_form

    forms = []
    for variance in ("centred_pow", "centred_mul", "moments_mul", "moments_pow", "jax2tf"):
        for normalise in ("div", "reciprocal", "rsqrt", "reciprocal_gamma", "keras"):
            for affine in (True, False):
                if not affine and normalise in ("reciprocal_gamma", "keras"):
                    continue
                for opset in (17, 18):
                    forms.append((f"form_{variance}_{normalise}_{int(affine)}_{opset}",
                                  layernorm_form(variance, normalise, affine=affine, opset=opset)))
    for variance, normalise in FORMS:
        forms.append((f"form_{variance}_{normalise}_eps_input", layernorm_form(variance, normalise, eps_input=True)))
        forms.append((f"form_{variance}_{normalise}_axes01", layernorm_form(variance, normalise, axes=(1, 2))))
        forms.append((f"form_{variance}_{normalise}_axis1", layernorm_form(variance, normalise, axes=(1,))))
    for dynamic in (1, 2):
        forms.append((f"form_jax2tf_dynamic{dynamic}", layernorm_form("jax2tf", "reciprocal_gamma", dynamic=dynamic)))
    forms.append(("form_jax2tf_wrong_n", layernorm_form("jax2tf", "reciprocal_gamma", count=15)))
    options = [dict(), dict(affine=False), dict(constants_as_nodes=True), dict(gamma_shape=(1, 1, 8)),
               dict(gamma_shape=(5, 8)), dict(mean_also_used=True), dict(swapped=True), dict(axes=(1, 2)),
               dict(axes=(-2, -1)), dict(opset=18), dict(shape=(2, 5, 8), scope="")]
    for index, option in enumerate(options):
        try:
            forms.append((f"graph_layernorm_{index}", graphs.layernorm_graph(**option)))
        except Exception:  # noqa: BLE001 - an option this checkout's helper does not take
            pass
    forms.append(("graph_layernorm2d", graphs.layernorm2d_graph()))
    return forms


def shuffled(model, seed: int):
    """The same graph with its nodes in a random (unsorted) order (also used by tests/graph)."""
    import numpy as np
    import onnx

    shuffled = onnx.ModelProto()
    shuffled.CopyFrom(model)
    order = np.random.default_rng(seed).permutation(len(model.graph.node))
    del shuffled.graph.node[:]
    shuffled.graph.node.extend(model.graph.node[int(i)] for i in order)
    return shuffled


def mutated(model, rng):
    """One to three of: rewire an input, change/drop an attribute, drop a node, make an
    intermediate a graph output, give a node a doc string, duplicate a consumer."""
    import onnx
    from onnx import helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    for _ in range(int(rng.integers(1, 4))):
        if not graph.node:
            break
        node = graph.node[int(rng.integers(len(graph.node)))]
        tensors = [i.name for i in graph.initializer] + [o for n in graph.node for o in n.output] + ["x", ""]
        kind = rng.choice(["edge", "attr", "attr_drop", "drop", "output", "doc", "consumer", "keepdims"])
        if kind == "edge" and node.input:
            node.input[int(rng.integers(len(node.input)))] = str(rng.choice(tensors))
        elif kind == "attr":
            name = str(rng.choice(["axes", "keepdims", "axis", "bogus"]))
            kept = [a for a in node.attribute if a.name != name]
            value = rng.choice([0, 1, -1, 2.5, "s"]) if name != "axes" else [int(rng.integers(-3, 3))]
            value = value.item() if hasattr(value, "item") else value
            del node.attribute[:]
            node.attribute.extend(kept + [helper.make_attribute(name, value)])
        elif kind == "attr_drop" and node.attribute:
            del node.attribute[int(rng.integers(len(node.attribute)))]
        elif kind == "drop":
            graph.node.remove(node)
        elif kind == "output" and node.output:
            graph.output.append(helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, None))
        elif kind == "doc":
            node.doc_string = "mutated"
        elif kind == "consumer" and node.output:
            graph.node.append(helper.make_node("Relu", [node.output[0]], [f"extra_{len(graph.node)}"]))
            graph.output.append(helper.make_tensor_value_info(f"extra_{len(graph.node) - 1}",
                                                              onnx.TensorProto.FLOAT, None))
        elif kind == "keepdims":
            for attribute in node.attribute:
                if attribute.name == "keepdims":
                    attribute.i = 1 - attribute.i
    return model.SerializeToString()


def shapes_base():
    """x[2, n, 8] -> Reshape(x, [dim0, -1, last]) + 2 * w, times the dynamic dim n: Constant nodes, static and
    dynamic Shape -> Gather/Slice, a foldable chain, for the mutations to break."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def ints(name, values):
        return numpy_helper.from_array(np.array(values, dtype=np.int64), name)

    def constant(name, array):
        return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(array, name + "_v"))

    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             constant("i0", np.array(0, np.int64)),
             helper.make_node("Gather", ["shape", "i0"], ["dim0"], name="gather0", axis=0),
             helper.make_node("Gather", ["shape", "i1"], ["dim1"], name="gather1", axis=0),
             helper.make_node("Slice", ["shape", "starts", "ends"], ["last"], name="slice"),
             helper.make_node("Unsqueeze", ["dim0", "axes0"], ["dim0_1d"], name="unsqueeze"),
             helper.make_node("Concat", ["dim0_1d", "minus_one", "last"], ["target"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["reshaped"], name="reshape"),
             constant("w", np.linspace(-1, 1, 8, dtype=np.float32)),
             constant("two", np.array(2.0, np.float32)),
             helper.make_node("Mul", ["w", "two"], ["w2"], name="scale_w"),
             helper.make_node("Add", ["reshaped", "w2"], ["biased"], name="bias"),
             helper.make_node("Cast", ["dim1"], ["dim1_f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["biased", "dim1_f"], ["y"], name="times_n")]
    inits = [ints("i1", 1), ints("starts", [2]), ints("ends", [3]), ints("axes0", [0]), ints("minus_one", [-1])]
    graph = helper.make_graph(nodes, "shapes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "n", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
