"""The shipped table of the real TensorRT-RTX parser's verdicts (issue 23 item 2) and its docs page:
both are what `python -m bench.rtx --ops` writes (bench/rtx/ops.py, bench/rtx/ops_doc.py)."""
from __future__ import annotations

import json

from bench.rtx import ops, ops_doc
from trtpipe.trt.parser import measured
from trtpipe.trt.parser.parser_ops import DATA_DIR, shipped_versions

VERDICTS = {"built", "not built", "crashed", *measured.REFUSED}


def test_the_table_names_product_version_and_the_command_and_covers_every_documented_op():
    doc = measured.table()
    assert (doc["product"], doc["version"], doc["generated_by"]) == ("TensorRT-RTX", "1.7.1", "python -m bench.rtx --ops")
    assert "onnxruntime-ep-nv-tensorrt-rtx-cu12 0.5.0" in doc["measured_with"]
    documented = set().union(*(json.loads((DATA_DIR / f"{v}.json").read_text())["ops"] for v in shipped_versions()))
    assert set(doc["ops"]) == documented
    for op, row in doc["ops"].items():
        assert {"FP32", "FP16", "BF16"} <= set(row["types"]), op
        assert all(v["verdict"] in VERDICTS for v in row["types"].values()), op
        assert all(v.get("reason") for v in row["types"].values() if v["verdict"] != "built"), op
    built = [(op, t) for op, row in doc["ops"].items() for t, v in row["types"].items() if v["verdict"] == "built"]
    assert len(built) > 400 and ("Conv", "FP16") in built and ("MatMul", "BF16") in built
    assert doc["ops"]["ConvInteger"]["types"]["UINT8"]["verdict"] == "refused by the parser"


def test_the_docs_page_is_generated_from_the_table():
    assert ops.DOC.read_text() == ops_doc.page(measured.table(), ops.documented("11.1"), ops.documented("10.16"))
