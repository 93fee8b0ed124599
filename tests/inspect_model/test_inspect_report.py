"""`trtpipe-inspect`'s report, in process, on real models (tests/inspect_model/inspected_models.py and
the built-in transformer written to a file): each fact read from the file, each stage's preview."""

from __future__ import annotations

import onnx
import pytest

from tests.inspect_model.inspected_models import ROWS, write_everything_model
from trtpipe.inspect_model.command import inspect_model
from trtpipe.inspect_model.report_text import report_lines
from trtpipe.models.transformer import build_transformer


@pytest.fixture(scope="module")
def everything(tmp_path_factory):
    folder = tmp_path_factory.mktemp("everything")
    path = write_everything_model(folder / "m.onnx")
    before = sorted(p.name for p in folder.iterdir())
    report = inspect_model(path)
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written next to the model
    return report


def test_interface_opset_producer_and_histogram(everything):
    model = everything["model"]
    assert [(v["name"], v["type"], v["shape"], v["dynamic"]) for v in model["inputs"]] == [
        ("x", "float32", ["batch", 8], ["batch"]), ("ids", "int64", ["batch", 4], ["batch"]),
        ("step", "int64", [1], [])]
    assert model["outputs"][0]["shape"] == ["batch", 8]
    assert (model["opset"], model["ir_version"], model["producer"]) == (17, 8, "hand-made 1.0")
    assert model["opsets"] == {"ai.onnx": 17, "com.example": 1}
    assert model["nodes"] == 14 and model["nodes_with_subgraphs"] == 16
    assert model["op_histogram"]["Cast"] == 3 and model["op_histogram"]["com.example.Mystery"] == 1
    assert model["op_histogram"]["Neg"] == 1  # counted inside the If's else branch


def test_weights_external_data_subgraphs_and_authored_precision(everything):
    model = everything["model"]
    weights = model["weights"]
    assert weights["initializers"] == 5
    assert weights["bytes"] == ROWS * 8 * 4 + 8 * 8 * 4 + 4 + 1 + 8
    assert weights["external_files"] == {"m.onnx.data": {"tensors": 1, "bytes": ROWS * 8 * 4}}
    assert [(s["node"], s["op_type"], s["body"], s["nodes"]) for s in model["subgraphs"]] == [
        ("branch", "If", "else_branch", 1), ("branch", "If", "then_branch", 1)]  # attribute order
    authored = model["authored"]
    assert authored["casts_to_low_precision"] == {"fp16": 1} and authored["low_precision_weights"] == {}
    assert authored["qdq"] == {"QuantizeLinear": 1, "DequantizeLinear": 1}
    assert authored["quantized_code_types"] == ["int8"]


def test_stage_previews_and_parser_check(everything):
    stages = everything["stages"]
    assert stages["sanitize"]["constants_lowered"] == 1
    assert stages["upgrade_opset"]["target"] == 17 and not stages["upgrade_opset"]["converts"]
    precision = stages["precision"]
    assert precision["integer_ranges"]["ids"]["high"] == ROWS
    assert precision["integer_ranges_needed"] == ["step"]
    assert precision["shapes_needed"] == ["x", "ids"]
    parser = stages["parser"]
    assert parser["errors"] == ["com.example.Mystery"]
    assert parser["findings"][0]["nodes"] == ["custom"]


def test_text_names_what_a_user_looks_for(everything):
    text = "\n".join(report_lines(everything))
    for expected in ("x                            float32   [batch, 8]  (dynamic: batch)",
                     "opset 17, IR version 8, producer hand-made 1.0", "external data: m.onnx.data: 1 tensors",
                     "If branch.then_branch (1 nodes)", "1 Casts to FP16", "Q/DQ: 1 QuantizeLinear",
                     f"ids integers in [0, {ROWS})", "a range for integer input(s) step",
                     "a concrete shape for x, ids", "com.example.Mystery (1 node(s): custom)"):
        assert expected in text, (expected, text)


def test_builtin_transformer_as_its_stages_see_it(tmp_path):
    """The previews agree with what a run of the same model reports: sanitize's `152 -> 120 nodes,
    32 folded` and upgrade_opset's `opset 13 -> 17, 5 LayerNorm fused` (README's transcript)."""
    path = tmp_path / "transformer.onnx"
    onnx.save(build_transformer(), str(path))
    report = inspect_model(path)
    sanitize, upgrade = report["stages"]["sanitize"], report["stages"]["upgrade_opset"]
    assert sanitize["constants_lowered"] + sanitize["nodes_foldable_at_least"] == 32
    assert (upgrade["opset"], upgrade["target"], upgrade["converts"]) == (13, 17, True)
    assert upgrade["layernorm"]["fused"] == 5 and upgrade["layernorm"]["refused"] == []
    ranges = report["stages"]["precision"]["integer_ranges"]
    assert {name: (r["low"], r["high"]) for name, r in ranges.items()} == {"input_ids": (0, 256),
                                                                          "attention_mask": (0, 2)}
    assert report["stages"]["parser"]["errors"] == []
