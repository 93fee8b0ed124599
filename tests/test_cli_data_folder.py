"""A folder of `.npz` files as `data.path` is one data set of several input sets (issue 30, item 5).

Before: `data.path=<folder>` was refused ("is a folder, not a regular file"); the only way to give
several real input sets was Polygraphy JSON. Through the real command line on a MatMul model with a
dynamic batch."""

from __future__ import annotations

import json

import numpy as np

from tests.cli_helpers import run_trtpipe
from tests.test_vacuous_validation import matmul_model

STAGES = "stages=[sanitize,upgrade_opset,precision,validate]"


def write_sets(folder, *seeds: int, rows: int = 2) -> None:
    folder.mkdir(exist_ok=True)
    for seed in seeds:
        values = np.random.default_rng(seed).standard_normal((rows, 16)).astype(np.float32)
        np.savez(folder / f"set{seed}.npz", x=values)


def test_a_folder_of_npz_files_is_one_data_set_every_stage_runs_on_and_keys(tmp_path):
    matmul_model(tmp_path / "m.onnx")
    write_sets(tmp_path / "sets", 1, 2, 3)
    (tmp_path / "sets" / "README.txt").write_text("not an input set\n")
    run = run_trtpipe(tmp_path, "model.path=m.onnx", "data.path=sets", STAGES)
    assert run.code == 0, run.stdout + run.stderr
    report = json.loads((run.run_dir / "validate" / "validation.json").read_text())
    assert report["iterations"] == 3, report  # every .npz is a set; the README is not
    assert "on 3 input set(s)" in run.stdout, run.stdout

    again = run_trtpipe(tmp_path, "model.path=m.onnx", "data.path=sets", STAGES, run_name="again")
    assert again.statuses() == {"sanitize": "cached", "upgrade_opset": "cached", "precision": "cached",
                                "validate": "cached"}, again.stdout

    write_sets(tmp_path / "sets", 4)  # one set more: the stages that read the data run again
    more = run_trtpipe(tmp_path, "model.path=m.onnx", "data.path=sets", STAGES, run_name="more")
    assert more.code == 0, more.stdout + more.stderr
    assert more.statuses()["validate"] == "ran" and more.statuses()["sanitize"] == "cached", more.stdout
    assert json.loads((more.run_dir / "validate" / "validation.json").read_text())["iterations"] == 4


def test_a_set_of_the_folder_that_does_not_fit_the_model_is_named(tmp_path):
    matmul_model(tmp_path / "m.onnx")
    write_sets(tmp_path / "sets", 1)
    np.savez(tmp_path / "sets" / "set9.npz", x=np.zeros((2, 15), np.float32))
    run = run_trtpipe(tmp_path, "model.path=m.onnx", "data.path=sets", STAGES)
    assert run.code == 2, run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "set9.npz" in errors[0] and "[2, 15]" in errors[0], errors


def test_a_folder_without_npz_files_is_one_line(tmp_path):
    matmul_model(tmp_path / "m.onnx")
    (tmp_path / "empty").mkdir()
    run = run_trtpipe(tmp_path, "model.path=m.onnx", "data.path=empty", STAGES)
    assert run.code == 2, run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "is a folder with no .npz file in it" in errors[0] and "Fix: " in errors[0], errors
    assert not run.run_dir.exists()


def test_a_list_of_npz_files_and_folders_is_one_data_set_in_the_order_listed(tmp_path):
    """data.path=[file, folder, file]: every set of every entry, each file's digest in the keys."""
    matmul_model(tmp_path / "m.onnx")
    write_sets(tmp_path / "sets", 1, 2)
    write_sets(tmp_path / "more", 3, 4)
    listed = "data.path=[more/set3.npz,sets,more/set4.npz]"
    run = run_trtpipe(tmp_path, "model.path=m.onnx", listed, STAGES)
    assert run.code == 0, run.stdout + run.stderr
    assert json.loads((run.run_dir / "validate" / "validation.json").read_text())["iterations"] == 4
    block = next(s for s in run.manifest["stages"] if s["name"] == "precision")["material"]["config"]["data"]
    assert [name.rsplit("/", 2)[-2:] for name in block["files"]] == [
        ["more", "set3.npz"], ["sets", "set1.npz"], ["sets", "set2.npz"], ["more", "set4.npz"]], block["files"]

    write_sets(tmp_path / "more", 3, rows=3)  # one listed file rewritten: the stages using the data re-run
    changed = run_trtpipe(tmp_path, "model.path=m.onnx", listed, STAGES, run_name="changed")
    assert changed.code == 0, changed.stdout + changed.stderr
    assert changed.statuses()["precision"] == "ran" and changed.statuses()["sanitize"] == "cached", changed.stdout


def test_a_list_entry_that_is_not_an_input_set_is_one_line_naming_it(tmp_path):
    matmul_model(tmp_path / "m.onnx")
    write_sets(tmp_path / "sets", 1)
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.json").write_text("[]")
    np.savez(tmp_path / "narrow.npz", x=np.zeros((2, 15), np.float32))
    for entry, needle in [("missing.npz", "data.path entry {}/missing.npz does not exist"),
                          ("empty", "data.path entry {}/empty is a folder with no .npz file in it"),
                          ("notes.json", "data.path entry {}/notes.json is not an .npz file"),
                          ("sets/set1.npz", "repeats the input set"),
                          ("narrow.npz", "narrow.npz has shape [2, 15]")]:
        run = run_trtpipe(tmp_path, "model.path=m.onnx", f"data.path=[sets,{entry}]", STAGES, run_name=entry)
        assert run.code == 2, run.stdout + run.stderr
        errors = [line for line in run.stderr.splitlines() if line.strip()]
        assert len(errors) == 1 and needle.format(tmp_path) in errors[0] and "Fix: " in errors[0], errors
        assert "running" not in run.stdout and not run.run_dir.exists()
