"""A verdict computed on degenerate sample data says so, and stands (issue 30, item 5).

Before: `trtpipe: ok` on one-token sequences, or on inputs that are all zeros, read like any other
verdict. Through the real command line: the dynamic encoder of test_cli_sample_dims (token ids index an
embedding table) and the MatMul model of test_vacuous_validation."""

from __future__ import annotations

import json

import numpy as np
import onnx

from tests.cli_helpers import run_trtpipe
from tests.test_cli_sample_dims import NO_BUILD, dynamic_encoder
from tests.test_vacuous_validation import matmul_model


def verdict(run) -> tuple[bool, str | None, str]:
    report = json.loads((run.run_dir / "validate" / "validation.json").read_text())
    line = next(line for line in run.stdout.splitlines() if line.strip().startswith("validate ") and "ran" in line)
    return report["passed"], report["degenerate_data"], line


def test_a_sequence_of_length_one_is_flagged_in_the_verdict(tmp_path):
    onnx.save(dynamic_encoder(), str(tmp_path / "encoder.onnx"))
    run = run_trtpipe(tmp_path, "model.path=encoder.onnx", NO_BUILD, "++data.inputs.input_ids.shape=[2,1]")
    assert run.code == 0, run.stdout + run.stderr  # flagged, not failed
    passed, flag, line = verdict(run)
    assert passed and flag == "token ids 'input_ids': a sequence of length 1 in every input set", flag
    assert "emulated passed on 2 input set(s), on degenerate data: " + flag in line, line
    assert "verdict on degenerate data: token ids 'input_ids'" in run.stdout

    fine = run_trtpipe(tmp_path, "model.path=encoder.onnx", NO_BUILD, run_name="sequences")  # [1, 128]
    assert fine.code == 0 and verdict(fine)[1] is None and "degenerate" not in fine.stdout, fine.stdout


def test_constant_inputs_are_flagged_and_varying_ones_are_not(tmp_path):
    matmul_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "zeros.npz", x=np.zeros((2, 16), np.float32))
    run = run_trtpipe(tmp_path, "model.path=m.onnx", "data.path=zeros.npz", NO_BUILD)
    assert run.code == 0, run.stdout + run.stderr
    passed, flag, line = verdict(run)
    assert passed and flag == "every input is constant in every input set" and flag in line, line

    np.savez(tmp_path / "varied.npz", x=np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32))
    varied = run_trtpipe(tmp_path, "model.path=m.onnx", "data.path=[zeros.npz,varied.npz]", NO_BUILD,
                         run_name="varied")
    assert varied.code == 0 and verdict(varied)[1] is None, varied.stdout  # one set that varies is enough
