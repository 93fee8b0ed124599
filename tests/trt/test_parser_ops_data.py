"""The shipped TensorRT parser operator lists, and the script that makes them (bench/trt/parser_ops.py)."""

from __future__ import annotations

import json
import re

import pytest

from bench.trt.parser_ops import document, dumps, parse_operators_md, parse_plugin_readme
from trtpipe.trt.parser.parser_ops import DATA_DIR, load_list, shipped_versions, version_key

# The TensorRT versions trtpipe supports (DESIGN.md): 10.x (10.0 and the last 10.x) and 11.x.
REQUIRED_MAJORS = {10, 11}


@pytest.mark.parametrize("version", shipped_versions())
def test_each_shipped_list_parses_and_names_its_source(version):
    doc = json.loads((DATA_DIR / f"{version}.json").read_text())
    table = load_list(version)
    source = doc["source"]
    assert table.tensorrt_version == version == source["tensorrt_version_stated"]
    assert source["repository"] == "onnx/onnx-tensorrt" and source["path"] == "docs/operators.md"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]) and re.fullmatch(r"\d{4}-\d\d-\d\d", source["date"])
    assert source["pinned_by"].startswith("NVIDIA/TensorRT v") and doc["generated_by"] == "python -m bench.trt.parser_ops"
    assert table.plugins_source["repository"] == "NVIDIA/TensorRT" and "EfficientNMS_TRT" in table.plugins
    assert len(table.ops) > 150 and all(set(e) == {"supported", "types", "restrictions"} for e in table.ops.values())
    assert table.has_importer("Conv") and table.has_importer("If") and table.has_importer("Loop")
    assert not table.has_importer("ConvInteger") and not table.has_importer("DynamicQuantizeLinear")
    assert table.ops["MatMul"]["types"][:2] == ["FP32", "FP16"]
    assert dumps(doc) == (DATA_DIR / f"{version}.json").read_text()  # the file is what the script writes


def test_the_lists_cover_the_supported_majors_and_only_grow():
    versions = shipped_versions()
    assert {version_key(v)[0] for v in versions} >= REQUIRED_MAJORS and "10.0" in versions
    supported = [{op for op, e in load_list(v).ops.items() if e["supported"]} for v in versions]
    # The selection rule (newest list not newer than the target) relies on this.
    for older, newer, (a, b) in zip(supported, supported[1:], zip(versions, versions[1:])):
        assert older <= newer, f"{a} -> {b} dropped {sorted(older - newer)}"


OLD_FORMAT = """# Supported ONNX Operators

TensorRT 8.5 supports operators up to Opset 17. Latest information ...

| Operator                  | Supported  | Supported Types | Restrictions |
|---------------------------|------------|-----------------|--------------|
| Abs                       | Y          | FP32, FP16, INT32 |
| BitShift                  | N          |
| Conv                      | Y          | FP32, FP16, INT8 | 2D or 3D convolutions only\\. Weights `W` must be an initailizer   |
| NonMaxSuppression         | Y [EXPERIMENTAL] | FP32, FP16 | Inputs must be initializers.
"""

NEW_FORMAT = """TensorRT 11.1 supports operators in the inclusive range of opset 9 to opset 24. More ...

## Operator Support Matrix

| Operator | Supported | Supported Types | Restrictions |
|---|---|---|---|
| DynamicQuantizeLinear     | N          | Not supported. Compose it as a model local function.
| Selu                      | Y          | FP32, FP16, BF16, |
| Xor                       | Y          | BOOL

## TensorRT Custom Operators

| Not | a | row |
"""


def test_the_markdown_table_is_parsed_leniently():
    old = parse_operators_md(OLD_FORMAT)
    assert old["tensorrt_version"] == "8.5" and old["opset_range"] == [None, 17]
    assert old["ops"]["NonMaxSuppression"] == {"supported": True, "types": ["FP32", "FP16"],
                                               "restrictions": "Inputs must be initializers."}
    assert old["ops"]["BitShift"] == {"supported": False, "types": [], "restrictions": ""}
    assert old["ops"]["Conv"]["restrictions"].startswith("2D or 3D convolutions only")
    new = parse_operators_md(NEW_FORMAT)
    assert new["tensorrt_version"] == "11.1" and new["opset_range"] == [9, 24]
    assert set(new["ops"]) == {"DynamicQuantizeLinear", "Selu", "Xor"}  # the table ends at the next heading
    note = "Not supported. Compose it as a model local function."
    assert new["ops"]["DynamicQuantizeLinear"] == {"supported": False, "types": [], "restrictions": note}
    assert new["ops"]["Selu"]["types"] == ["FP32", "FP16", "BF16"] and new["ops"]["Xor"]["types"] == ["BOOL"]


def test_a_file_without_the_version_sentence_is_refused():
    with pytest.raises(ValueError, match="does not state"):
        parse_operators_md("| Operator | Supported |\n|---|---|\n| Abs | Y |\n")


def test_plugin_readme_names_and_versions():
    text = ("| Plugin | Name | Versions |\n|---|---|---|\n"
            "| [efficientNMSPlugin](efficientNMSPlugin) [DEPRECATED] | EfficientNMS_TRT | 1 |\n"
            "| [roiAlignPlugin](roiAlignPlugin) [DEPRECATED] | ROIAlign_TRT | 1 |\n"
            "| [roiAlignPlugin](roiAlignPlugin) | ROIAlign_TRT | 2 |\n"
            "| [skipLayerNormPlugin](skipLayerNormPlugin) | CustomSkipLayerNormPluginDynamic | 5, 6, 7, 8 |\n")
    assert parse_plugin_readme(text) == {"CustomSkipLayerNormPluginDynamic": ["5", "6", "7", "8"],
                                         "EfficientNMS_TRT": ["1"], "ROIAlign_TRT": ["1", "2"]}
    doc = document(NEW_FORMAT, {"repository": "onnx/onnx-tensorrt", "commit": "0" * 40}, text, {"ref": "v11.1"})
    assert json.loads(dumps(doc)) == doc


def test_the_lists_ship_in_the_wheel():
    import tomllib
    from pathlib import Path

    setuptools = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "trtpipe.trt.parser.onnx_parser_ops" in setuptools["packages"]
    assert setuptools["package-data"]["trtpipe.trt.parser.onnx_parser_ops"] == ["*.json"]
    assert DATA_DIR.name == "onnx_parser_ops" and len(list(DATA_DIR.glob("*.json"))) == len(shipped_versions()) >= 3
