"""Issue 33 item 6, end to end: a repeated run takes its composition and its model's input facts from
the memos (trtpipe/memo/) and writes what a composed run writes; a change between runs is seen.
The memos' keys and safety rules one by one: test_front_door_memo.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import trtpipe
from tests.test_front_door import _COUNT_COMPOSITIONS
from tests.test_front_door_memo import _token_model
from trtpipe.memo import model_inputs

PACKAGE = Path(trtpipe.__file__).resolve().parent

def _run(tmp_path: Path, *overrides: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    script = tmp_path / "count.py"
    script.write_text(_COUNT_COMPOSITIONS)  # COMPOSITIONS=n ... IMPORTED=[heavy modules imported]
    environment = {**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache"), **(env or {})}
    environment.pop("TRTPIPE_DEBUG", None)
    done = subprocess.run([sys.executable, str(script), *overrides], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done, Path(re.findall(r"manifest: (\S+)", done.stdout)[-1]).parent


def _written(run_dir: Path) -> dict[str, str]:
    """The run directory's text files and the console, with the run's own folder and times masked."""
    files = {str(p.relative_to(run_dir)): p.read_text() for p in sorted(run_dir.rglob("*"))
             if p.is_file() and p.suffix in (".json", ".yaml", ".md", ".txt", ".log")}
    masked = {}
    for name, text in files.items():
        text = text.replace(str(run_dir), "RUN").replace(run_dir.name, "TIME")
        text = re.sub(r"\d+\.\d\ds |\| \d+\.\d\d \||\"seconds\": [0-9.e-]+|\[\d{4}-[\d :,-]+\]", "T", text)
        masked[name] = text
    return masked


def _three_runs(tmp_path: Path, *command: str):
    """Cold (fills the cache; no cache yet to remember a composition in), composed (remembers it),
    remembered: the last two as (process, run directory)."""
    _run(tmp_path, *command)
    # The source-digest memo serves a record only when the model's ctime was 2 s older than the record
    # (cache/digest_memo.py, git's "racy" rule); the cold run creates the model or links to it, so a
    # composed run started within 2 s re-hashes it legitimately (onnx imported): seen twice under CI
    # load (the counter named cache/hashing.py). Waiting makes the composed run's record one that
    # the remembered run is served.
    time.sleep(2.1)
    composed, remembered = _run(tmp_path, *command), _run(tmp_path, *command)
    assert "COMPOSITIONS=1" in composed[0].stderr and "COMPOSITIONS=0" in remembered[0].stderr
    assert _written(remembered[1]) == _written(composed[1])
    console = [[re.sub(r"\d+\.\d\ds |outputs/\S+", "", line) for line in done.stdout.splitlines()]
               for done, _ in (composed, remembered)]
    assert console[0] == console[1]
    return composed, remembered


def test_the_readmes_command_repeated_composes_nothing_reads_no_model_and_writes_the_same(tmp_path):
    _, (remembered, _) = _three_runs(tmp_path, "+recipe=transformer_fp16")
    assert "IMPORTED=[]" in remembered.stderr, remembered.stderr  # no NumPy, onnx, onnxruntime, matplotlib, plugin scan
    assert remembered.stdout.count(" cached ") == 4  # sanitize, upgrade_opset, precision, validate


def test_a_user_models_input_facts_come_from_the_memo_as_printed_before(tmp_path):
    _token_model(tmp_path / "tokens.onnx")
    _, (remembered, _) = _three_runs(tmp_path, "model.path=tokens.onnx", "data.sequence_length=16")
    assert "integers in [0, 50), read from the model" in remembered.stdout
    assert "shape [1, 16]" in remembered.stdout
    # a user's model is still checked before any stage (trtpipe.source: onnx); never the plugins
    assert "hydra_plugins" not in remembered.stderr


def test_a_recipe_edited_between_runs_is_composed_again(tmp_path):
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    recipe = recipes / "team.yaml"
    recipe.write_text("# @package _global_\nsanitize:\n  toposort: true\n")
    env = {"TRTPIPE_RECIPES": str(recipes)}
    command = ("+recipe=team", "stages=[sanitize]")
    for _ in range(2):
        _run(tmp_path, *command, env=env)
    recipe.write_text("# @package _global_\nsanitize:\n  toposort: false\n")
    done, run_dir = _run(tmp_path, *command, env=env)
    assert "COMPOSITIONS=1" in done.stderr
    assert json.loads((run_dir / "manifest.json").read_text())["config"]["sanitize"]["toposort"] is False
    remembered, run_dir = _run(tmp_path, *command, env=env)
    assert "COMPOSITIONS=0" in remembered.stderr
    assert json.loads((run_dir / "manifest.json").read_text())["config"]["sanitize"]["toposort"] is False


def test_the_model_inputs_key_holds_every_module_that_computes_the_answer(tmp_path):
    """CODE lists the modules with_model_ranges runs: whatever it imports is in the key."""
    model = _token_model(tmp_path / "tokens.onnx")
    code = ("import sys\nbefore = set(sys.modules)\nimport trtpipe.data as d\n"
            f"d.with_model_ranges({{'seed': 0, 'iterations': 1, 'inputs': {{}}, 'path': None}}, r'{model}', 16)\n"
            "print('\\n'.join(m for m in set(sys.modules) - before if m.startswith('trtpipe.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert done.returncode == 0, done.stderr
    imported = {name.removeprefix("trtpipe.").replace(".", "/") for name in done.stdout.split()}
    files = {name for name in imported if (PACKAGE / f"{name}.py").is_file()}  # packages' __init__ hold no logic
    assert files and files <= {name.removesuffix(".py") for name in model_inputs.CODE}, \
        files - {name.removesuffix(".py") for name in model_inputs.CODE}
