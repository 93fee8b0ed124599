"""bench/quantized's own rules, without running the benchmark (it needs ModelOpt and the oracle: `python -m
bench.quantized`): Casts next to a Q/DQ are counted off the written graph, and a model counts in P only
when every trtpipe config kept every quantized layer and passed."""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from bench.quantized import record
from bench.quantized.measure import Converted, cast_counts
from bench.quantized.run import Row
from bench.quantized.sources import BY_NAME
from tests.precision.qdq_models import qdq_model


def test_casts_next_to_qdq_are_those_reading_or_feeding_one():
    model = qdq_model("int8")
    graph = model.graph
    # A Cast pair before the input's QuantizeLinear (one of them next to it) and one between the Conv and
    # the Relu (next to neither a Q nor a DQ).
    q = next(n for n in graph.node if n.name == "in_Q")
    q.input[0] = "x_back"
    conv = next(n for n in graph.node if n.name == "conv")
    conv.output[0] = "c_pre"
    nodes = [helper.make_node("Cast", ["x"], ["x_half"], to=TensorProto.FLOAT16, name="to_half"),
             helper.make_node("Cast", ["x_half"], ["x_back"], to=TensorProto.FLOAT, name="to_float"),
             helper.make_node("Cast", ["c_pre"], ["c"], to=TensorProto.FLOAT, name="after_conv")]
    order = list(graph.node)
    order.insert(0, nodes[1])
    order.insert(0, nodes[0])
    order.insert(order.index(conv) + 1, nodes[2])
    del graph.node[:]
    graph.node.extend(order)
    onnx.checker.check_model(model, full_check=True)
    assert cast_counts(model) == (3, 1)   # only to_float feeds a Q/DQ
    assert cast_counts(qdq_model("int8")) == (0, 0)


def _converted(tool: str, passed: bool, lost=(), fell_back=()) -> Converted:
    return Converted(tool, ok=True, passed=passed, exit_code=0 if passed else 1,
                     engine={"source_quantized": ["c"], "output_quantized": [] if lost else ["c"], "source_linear": 1,
                             "output_linear": 1, "lost": list(lost), "fell_back": list(fell_back)})


def test_a_model_counts_when_every_trtpipe_config_keeps_its_layers_and_passes():
    bert = BY_NAME["bert"]
    good = Row(bert, "ort_qdq", 1, 1, converted=[_converted("trtpipe default", True),
                                                  _converted("trtpipe transformer_fp16", True),
                                                  _converted("AutoCast", False, lost=["c (int8xint8 -> halfxhalf)"])])
    failing = Row(bert, "modelopt_int8", 1, 1, converted=[_converted("trtpipe default", True),
                                                          _converted("trtpipe transformer_fp16", False)])
    lossy = Row(bert, "modelopt_fp8", 1, 1, converted=[_converted("trtpipe default", True, lost=["c (x -> y)"])])
    slow = Row(bert, "modelopt_fp8", 1, 1,
               converted=[_converted("trtpipe default", True, fell_back=["mm [fully_connected]: operands floatxfloat"])])
    assert [r.counts for r in (good, failing, lossy, slow)] == [True, False, False, False]
    figures = record.figures([good, failing, lossy, slow])
    assert figures["summary"] == "quantized: 1/4 models keep every quantized layer and pass"
    assert figures["bert.ort_qdq.autocast.lost"] == 1 and "bert.ort_qdq.autocast.passed" not in figures
    assert figures["bert.modelopt_int8.transformer_fp16.passed"] == 0
