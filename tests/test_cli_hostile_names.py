"""Names are data (issue 32, items 5 and 6): terminal escape sequences, newlines and `|` in a
model's output and node names, or in a sweep's overrides, reach no console line and no
`summary.md` row raw; each is shown escaped, once, on its own line.

Reproduced before the fix: the verdict table wrote the output name raw (the screen cleared,
the row split in two), the failure line too, and a model file name holding a newline split
that job's row of summary.md.
"""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import run_trtpipe

CLEAR = "\x1b[2J\x1b[31m"  # clear the screen, then red
TITLE = "\x1b]0;owned\x07"  # set the terminal's title
OUTPUT = "out" + CLEAR + "\nput|" + "x" * 30 + "\x1b[0m"  # longer than the table's column: shortened
POW = "pow" + CLEAR + "\r\nbad|node"


def hostile_model(path):
    """x * 3e4, squared, averaged: the square overflows FP16 (naive_fp16 fails on it)."""
    nodes = [helper.make_node("Mul", ["x", "big"], ["m"], name="scale" + TITLE),
             helper.make_node("Pow", ["m", "two"], ["p"], name=POW),
             helper.make_node("ReduceMean", ["p"], [OUTPUT], name="mean\n" + CLEAR, keepdims=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [1, 1])],
        [numpy_helper.from_array(np.full((1, 16), 3e4, np.float32), "big"),
         numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def test_escape_sequences_and_newlines_in_names_reach_the_console_escaped(tmp_path):
    model = hostile_model(tmp_path / "hostile.onnx")
    run = run_trtpipe(tmp_path, f"model.path={model}", "+recipe=naive_fp16")
    assert run.code == 1, run.stdout + run.stderr
    console = run.stdout + run.stderr
    assert "\x1b" not in console and "\r" not in console and "\x07" not in console
    # Each row of the verdict table is one line, the name escaped before it was shortened.
    rows = [line for line in run.stdout.splitlines() if line.startswith("    emulated ")]
    assert len(rows) == 1 and "FAIL: nonfinite" in rows[0], run.stdout
    shown = rows[0].split()[1]  # shortened from the middle to the column's 28 characters
    assert len(shown) == 28 and shown.startswith("out\\x1b[2") and shown.endswith("xx\\x1b[0m"), rows[0]
    assert not any(line.startswith(("put|", "bad|node")) for line in console.splitlines()), console
    # The failure line: one line naming the output and the culprit node, escaped.
    failure = [line for line in run.stderr.splitlines() if "validation failed:" in line]
    assert len(failure) == 1, run.stderr
    assert "first non-finite node: pow\\x1b[2J\\x1b[31m\\r\\nbad|node (Pow, fp16)" in failure[0]
    assert "out of tolerance on out\\x1b[2J\\x1b[31m\\nput|" in failure[0]
    # validation.json keeps the names exactly.
    stage = next(s for s in run.manifest["stages"] if s["name"] == "validate")
    report = json.loads((run.run_dir / stage["outputs"]["report"]["path"]).read_text())
    assert list(report["candidates"][0]["outputs"]) == [OUTPUT]


def test_a_newline_in_a_sweep_override_keeps_its_summary_row_on_one_line(tmp_path):
    folder = tmp_path / "two\nlines|here"
    folder.mkdir()
    model = hostile_model(folder / "m.onnx")
    run = run_trtpipe(tmp_path, "-m", f"model.path='{model}'", "+recipe=naive_fp16,fp32", "hydra.sweep.dir=sweep")
    assert run.code == 1, run.stdout + run.stderr
    text = (tmp_path / "sweep" / "summary.md").read_text().splitlines()
    # The model.path every job has: once, above the table, on one line.
    assert text[0].startswith("Every job: ") and "two\\nlines\\|here/m.onnx" in text[0], text
    lines = [line for line in text if line.startswith("|")]
    assert len(lines) == 4 and len(text) == 6, text  # that line, a blank one, heading, rule, one line per job
    cells = [re.split(r"(?<!\\)\|", line) for line in lines]
    assert len({len(row) for row in cells}) == 1, lines  # no cell added by a `|` in a name
    assert "\x1b" not in "".join(text)
    failed = next(line for line in lines[2:] if "FAILED" in line)
    assert "pow\\x1b[2J\\x1b[31m\\r\\nbad\\|node" in failed, failed
    assert "\x1b" not in run.stdout + run.stderr
