"""Mutated ONNX graphs for the fuzzer (issue 13, item 12).

A small, valid graph (MatMul, Add, LayerNormalization, Softmax, Cast, Relu, Mul) is
mutated at random: a node's op type, an edge rewired (to another tensor or a dangling
name), an attribute changed/added/removed, a tensor's element type or shape changed, a
node or initializer dropped. The mutated model runs through
sanitize -> upgrade_opset -> precision -> validate in process (trtpipe.api.run).

Property: the run ends in success, PipelineFailed or UserError (exit 0, 1 or 2) and no
other exception; nothing is written outside the run directory and the cache; the
cache verifies afterwards (bench/fuzz_cases.cache_problems).
"""

from __future__ import annotations

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from bench.fuzz.fuzz_cases import _files, _outside_changes, cache_problems

STAGES = "stages=[sanitize,upgrade_opset,precision,validate]"
OP_TYPES = ["Relu", "Add", "Mul", "MatMul", "Softmax", "Cast", "Identity", "Sigmoid", "Transpose", "Reshape",
            "LayerNormalization", "Concat", "ReduceMean", "Sqrt", "Div", "NoSuchOp"]
ELEM_TYPES = [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32,
              TensorProto.BOOL, TensorProto.STRING, TensorProto.BFLOAT16, 0]
ATTR_VALUES = st.one_of(st.integers(-5, 5), st.floats(-10, 10), st.just(float("nan")), st.text(max_size=4),
                        st.lists(st.integers(-3, 3), min_size=1, max_size=4))


def base_model() -> onnx.ModelProto:
    """x[2,4,8] -> MatMul -> Add -> LayerNorm -> Softmax -> Cast(fp16) -> Cast(fp32) -> Relu * 0.5 -> y."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
             numpy_helper.from_array(np.ones(8, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(8, np.float32), "beta"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "b"], ["biased"], name="bias"),
             helper.make_node("LayerNormalization", ["biased", "gamma", "beta"], ["normed"], name="ln", axis=-1,
                              epsilon=1e-5),
             helper.make_node("Softmax", ["normed"], ["probs"], name="softmax", axis=-1),
             helper.make_node("Cast", ["probs"], ["probs16"], name="to16", to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["probs16"], ["probs32"], name="to32", to=TensorProto.FLOAT),
             helper.make_node("Relu", ["probs32"], ["act"], name="relu"),
             helper.make_node("Mul", ["act", "half"], ["y"], name="scale")]
    graph = helper.make_graph(nodes, "fuzz_base", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@st.composite
def mutated_models(draw, max_mutations: int = 3) -> bytes:
    model = base_model()
    graph = model.graph
    for _ in range(draw(st.integers(1, max_mutations))):
        tensors = ["x", "", "dangling"] + [i.name for i in graph.initializer] + [o for n in graph.node for o in n.output]
        kind = draw(st.sampled_from(["op", "edge", "attr", "attr_drop", "elem", "shape", "drop_node", "drop_init",
                                     "output"]))
        if kind in ("op", "edge", "attr", "attr_drop", "drop_node") and not graph.node:
            continue
        node = graph.node[draw(st.integers(0, len(graph.node) - 1))] if graph.node else None
        if kind == "op":
            node.op_type = draw(st.sampled_from(OP_TYPES))
        elif kind == "edge":
            if node.input and draw(st.booleans()):
                node.input[draw(st.integers(0, len(node.input) - 1))] = draw(st.sampled_from(tensors))
            else:
                node.input.append(draw(st.sampled_from(tensors)))
        elif kind == "attr":
            name = draw(st.sampled_from(["axis", "to", "epsilon", "perm", "keepdims", "bogus"]))
            kept = [a for a in node.attribute if a.name != name]
            del node.attribute[:]
            node.attribute.extend(kept + [helper.make_attribute(name, draw(ATTR_VALUES))])
        elif kind == "attr_drop" and node.attribute:
            del node.attribute[draw(st.integers(0, len(node.attribute) - 1))]
        elif kind == "elem":
            values = list(graph.input) + list(graph.output)
            values[draw(st.integers(0, len(values) - 1))].type.tensor_type.elem_type = draw(st.sampled_from(ELEM_TYPES))
        elif kind == "shape":
            dims = graph.input[0].type.tensor_type.shape.dim if graph.input else []
            if dims:
                dim = dims[draw(st.integers(0, len(dims) - 1))]
                value = draw(st.one_of(st.integers(-1, 9), st.sampled_from(["batch", ""])))
                if isinstance(value, int):
                    dim.dim_value = value
                else:
                    dim.dim_param = value
        elif kind == "drop_node":
            graph.node.remove(node)
        elif kind == "drop_init" and graph.initializer:
            del graph.initializer[draw(st.integers(0, len(graph.initializer) - 1))]
        elif kind == "output":
            graph.output[0].name = draw(st.sampled_from(tensors))
    return model.SerializeToString()


def check_graph(model_bytes: bytes, workdir) -> str | None:
    from trtpipe.api import PipelineFailed, run
    from trtpipe.errors import UserError

    model_path = workdir / "model.onnx"
    model_path.write_bytes(model_bytes)
    cache, run_dir = workdir / "cache", workdir / "run"
    before = _files(workdir, (cache, run_dir))
    try:
        result = run([f"model.path={model_path}", STAGES, f"cache.dir={cache}"], run_dir=run_dir, start_dir=workdir)
        code = result.exit_code
    except PipelineFailed as failed:
        code = failed.result.exit_code
    except UserError:
        code = 2
    except Exception as error:  # noqa: BLE001 - any other exception is the defect we look for
        return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
    if code not in (0, 1, 2):
        return f"exit code {code}"
    changed = _outside_changes(before, _files(workdir, (cache, run_dir)))
    if changed:
        return f"written outside the run directory and the cache: {changed[:3]}"
    return cache_problems(cache) if cache.is_dir() else None
