"""LayerNorm fusion on the ModelProto (layernorm_proto.py) writes the same model and report as the
onnx-graphsurgeon round trip, byte for byte, and falls back to the round trip where it must.

The wide differential check (built-in models, encoders, the wild corpus, mutated and fuzzed
graphs) is bench/same_output/same_output.py --stage upgrade_opset; these are the real graphs it covers that run in seconds.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.same_output.same_output_cases import shuffled
from tests.graph import graphs
from tests.graph.instance_norm_layernorm import instance_norm_layernorm
from tests.graph.layernorm_forms import layernorm_form, unbiased_std_form
from trtpipe.graph.layernorm import layernorm_fusion
from trtpipe.onnxmodel import value_info
from trtpipe.graph.onnx_gs.gs_export import OutOfScope
from trtpipe.graph.passes.opset import convert_opset
from trtpipe.models import builtin_model



def _unusual_fields() -> onnx.ModelProto:
    """Fields the round trip rewrites: a node doc string, an unnamed Constant tensor, an empty node
    name, a dim denotation, an input listed twice as initializer, a dead node, an unused initializer."""
    model = graphs.layernorm_graph(constants_as_nodes=True)
    graph = model.graph
    graph.node[0].doc_string = "exported by hand"
    for node in graph.node:
        if node.op_type == "Constant":
            node.attribute[0].t.ClearField("name")
            node.name = ""
            break
    graph.input[0].type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    graph.node.append(helper.make_node("Neg", [graph.input[0].name], ["dead"], name="/dead"))
    graph.initializer.append(numpy_helper.from_array(np.ones(3, np.float32), "unused"))
    graph.input.append(helper.make_tensor_value_info("unused", TensorProto.FLOAT, [3]))
    return model


MODELS = {
    "transformer-shuffled": lambda: shuffled(convert_opset(builtin_model("transformer"), 17), 0),
    "t5": lambda: convert_opset(builtin_model("t5"), 17),  # RMSNorm: not a LayerNorm, nothing fused
    "nafnet": lambda: builtin_model("nafnet"),  # LayerNorm2d over channels: refused
    "jax2tf-dynamic": lambda: layernorm_form("jax2tf", "reciprocal_gamma", dynamic=1),
    "keras-opset18": lambda: layernorm_form("centred_mul", "keras", opset=18),
    "tf2onnx-global-average-pool": lambda: layernorm_form("gap_centred_mul", "keras"),
    "spatial-global-average-pool": lambda: layernorm_form("gap_centred_mul", "reciprocal", shape=(2, 4, 5, 6),
                                                          gamma_shape=(4, 1, 1)),
    "unbiased-std": lambda: unbiased_std_form(),
    "tf2onnx-instance-norm": lambda: instance_norm_layernorm(),
    "instance-norm-own-scale": lambda: instance_norm_layernorm(scale_fill=2.0),  # refused
    "no-affine": lambda: layernorm_form("moments_pow", "rsqrt", affine=False),
    "gamma-leading-ones": lambda: graphs.layernorm_graph(gamma_shape=(1, 1, 8)),
    "mean-also-used": lambda: graphs.layernorm_graph(mean_also_used=True),
    "layernorm2d": lambda: graphs.layernorm2d_graph(),
    "unusual-fields": _unusual_fields,
}


NOT_FUSED = ("t5", "nafnet", "mean-also-used", "layernorm2d", "unbiased-std",  # RMSNorm, LayerNorm2d, refusals
             "instance-norm-own-scale")


@pytest.mark.parametrize("name", MODELS)
def test_same_model_and_report_as_the_round_trip(name):
    model = MODELS[name]()
    working, _ = layernorm_fusion._inferred_working_copy(model)
    fast_model, fast_report = layernorm_fusion._fuse_on_proto(model, working)
    slow_model, slow_report = layernorm_fusion._fuse_with_graphsurgeon(model, working)
    assert fast_report == slow_report
    assert fast_model.SerializeToString() == slow_model.SerializeToString()
    if name in NOT_FUSED:
        assert not fast_report["fused"]
        assert fast_model is model
    else:
        assert fast_report["fused"]
        assert any(node.op_type == "LayerNormalization" for node in fast_model.graph.node)


def test_if_bodies_take_the_round_trip():
    model = graphs.layernorm_graph()
    graph = model.graph
    branch = helper.make_graph([helper.make_node("Identity", [graph.output[0].name], ["branch_out"])], "branch", [],
                               [helper.make_tensor_value_info("branch_out", TensorProto.FLOAT, None)])
    graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    graph.node.append(helper.make_node("If", ["cond"], ["chosen"], then_branch=branch, else_branch=branch))
    graph.output.append(helper.make_tensor_value_info("chosen", TensorProto.FLOAT, None))
    working, _ = layernorm_fusion._inferred_working_copy(model)
    with pytest.raises(OutOfScope):
        layernorm_fusion._fuse_on_proto(model, working)
    fused, report = layernorm_fusion.fuse_layernorms(model)  # the round trip still fuses
    assert report["fused"] and any(node.op_type == "LayerNormalization" for node in fused.graph.node)


@pytest.mark.parametrize("name", ["t5", "nafnet", "jax2tf-dynamic"])
def test_shapes_after_fusion_are_those_of_a_fresh_inference(name):
    """Nothing fused: the shapes inferred before matching are reused; fused: inferred again."""
    reference = value_info.infer_shapes(layernorm_fusion.fuse_layernorms(MODELS[name]())[0])
    result, _ = layernorm_fusion.fuse_layernorms_then_infer_shapes(MODELS[name]())
    assert result.SerializeToString() == reference.SerializeToString()


def test_what_graphsurgeon_cannot_import_takes_the_round_trip():
    """A string attribute that is not UTF-8 makes graphsurgeon's import raise: the ModelProto path must not
    write a model for it (gs_export.check_node), the round trip then fails as it always did."""
    model = graphs.layernorm_graph()
    extra = helper.make_node("Identity", [model.graph.output[0].name], ["extra"], name="extra")
    extra.attribute.add(name="note", type=onnx.AttributeProto.STRING, s=b"\xff\xfe")
    model.graph.node.append(extra)
    model.graph.output.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, None))
    working, _ = layernorm_fusion._inferred_working_copy(model)
    with pytest.raises(OutOfScope, match="UTF-8"):
        layernorm_fusion._fuse_on_proto(model, working)
    with pytest.raises(UnicodeDecodeError):
        layernorm_fusion._fuse_with_graphsurgeon(model, working)


def test_a_graph_input_named_like_the_new_scale_takes_the_round_trip():
    """The fusion adds its scale as a new initializer; a graph input already of that name (unused here) would
    make graphsurgeon hold two tensors of one name: the ModelProto path refuses, the round trip writes it."""
    base = layernorm_form("moments_pow", "rsqrt", affine=False)
    fused, _ = layernorm_fusion.fuse_layernorms(base)
    scale = next(node.input[1] for node in fused.graph.node if node.op_type == "LayerNormalization")
    model = onnx.ModelProto.FromString(base.SerializeToString())
    model.graph.input.append(helper.make_tensor_value_info(scale, TensorProto.FLOAT, [3]))
    working, _ = layernorm_fusion._inferred_working_copy(model)
    with pytest.raises(OutOfScope, match="name is taken"):
        layernorm_fusion._fuse_on_proto(model, working)
    slow_model, slow_report = layernorm_fusion._fuse_with_graphsurgeon(model, working)
    result, report = layernorm_fusion.fuse_layernorms(model)
    assert report == slow_report and result.SerializeToString() == slow_model.SerializeToString()



def test_fusions_are_logged_once_when_the_round_trip_takes_over(caplog):
    """Two custom-domain nodes whose domains are not imported: the ModelProto path matches, then refuses
    when writing; the round trip finds the same matches. Each fusion is logged once."""
    model = layernorm_form("moments_pow", "rsqrt", affine=False)
    for index, domain in enumerate(("com.a", "com.b")):
        output = f"custom{index}"
        model.graph.node.append(helper.make_node("Foo", [model.graph.output[0].name], [output],
                                                 name=output, domain=domain))
        model.graph.output.append(helper.make_tensor_value_info(output, TensorProto.FLOAT, None))
    caplog.set_level("DEBUG", logger="trtpipe.graph.layernorm.layernorm_fusion")
    _, report = layernorm_fusion.fuse_layernorms(model)
    assert report["fused"]
    assert "LayerNorm fusion through onnx-graphsurgeon" in caplog.text  # the ModelProto path gave up
    messages = [r.getMessage() for r in caplog.records
                if r.getMessage().startswith(("fused ", "LayerNorm at "))]
    assert len(messages) == len(report["fused"]) + len(report["refused"]) == len(set(messages))
