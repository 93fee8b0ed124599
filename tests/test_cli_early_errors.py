"""Mistakes caught where they are made, with the closest right answer (issue 24, item 6), through
the real command line on a small model built here (names of our choosing, not the built-ins').

- A misspelled `validate.outputs.<name>` is refused before any stage runs (it was found by the
  validate stage after every other stage had run), naming the model's outputs, the closest first;
  its Fix pastes. Names promote_outputs exposes (`t`, `t__fp32`) stay accepted.
- A precision rule that matches nothing suggests the same way for exact, regex and op_type (the
  closest node names; the model's op types, closest first) and names 'precision.on_unmatched=warn',
  which pastes.
- `--help` prints every recipe's whole description and the `model.builtin` choices.
"""

from __future__ import annotations

import re
import shlex

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli_helpers import cache_entries, run_trtpipe
from trtpipe.config.locate import recipe_dirs
from trtpipe.models.catalog import BUILTIN_MODULES

UP_TO_PRECISION = "stages=[sanitize,upgrade_opset,precision]"
WITH_VALIDATE = ("stages=[sanitize,upgrade_opset,precision,validate]", "validate.plot=false")


def two_output_model(hidden: str = "hidden_state") -> onnx.ModelProto:
    """x[2,8] -> MatMul -> Relu -> `hidden`; MatMul -> Softmax -> `probs` (random weights)."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm_out"], name="/block/attn/MatMul"),
        helper.make_node("Relu", ["mm_out"], [hidden], name="/block/attn/Relu"),
        helper.make_node("Softmax", ["mm_out"], ["probs"], name="/block/attn/Softmax", axis=-1),
    ]
    graph = helper.make_graph(nodes, "two_outputs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info(hidden, TensorProto.FLOAT, [2, 8]),
                               helper.make_tensor_value_info("probs", TensorProto.FLOAT, [2, 8])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("early_errors")
    onnx.save(two_output_model(), str(directory / "two.onnx"))
    onnx.save(two_output_model("hidden"), str(directory / "renamed.onnx"))  # another export's name
    return directory


def error_line(run) -> str:
    lines = [line for line in run.stderr.splitlines() if "Fix:" in line]
    assert len(lines) == 1, run.stdout + run.stderr
    return lines[0]


def quoted_words(line: str) -> list[str]:
    """What a user pastes: the Fix's quoted words (after "paste " where it says so)."""
    fix = line.split("Fix:", 1)[1].split(" paste ", 1)[-1]
    return [word for text in re.findall(r"'[^']*'", fix) for word in shlex.split(text)]


def test_a_misspelled_output_is_refused_before_any_stage_and_its_fix_pastes(workdir):
    cache = workdir / "cache_outputs"
    typo = "+validate.outputs.hidden_stat={cosine_min:0.99}"
    run = run_trtpipe(workdir, "model.path=two.onnx", *WITH_VALIDATE, typo, cache=cache, run_name="typo")
    assert run.code == 2, run.stdout + run.stderr
    line = error_line(run)
    assert line.startswith("trtpipe: error: validate.outputs.hidden_stat names no output of the model; "
                           "its outputs, closest first: hidden_state, probs."), line
    assert "running" not in run.stdout + run.stderr  # no stage ran (on main: all three before validate)
    assert cache_entries(cache) == [] and not run.run_dir.exists()
    pasted = quoted_words(line)
    assert pasted == ["~validate.outputs.hidden_stat", "++validate.outputs.hidden_state={cosine_min:0.99}"]
    fixed = run_trtpipe(workdir, "model.path=two.onnx", *WITH_VALIDATE, typo, *pasted, cache=cache,
                        run_name="typo_fixed")
    assert fixed.code == 0, fixed.stdout + fixed.stderr
    assert fixed.manifest["config"]["validate"]["outputs"] == {"hidden_state": {"cosine_min": 0.99}}


def test_a_sweep_whose_later_model_lacks_the_output_is_refused_before_the_first_job(workdir):
    """Sweeping two exports: the name is right for the first, wrong for the second (it was found
    only after the first job, and the second job's other stages, had run)."""
    cache = workdir / "cache_sweep"
    run = run_trtpipe(workdir, "-m", "model.path=two.onnx,renamed.onnx", *WITH_VALIDATE,
                      "+validate.outputs.hidden_state={cosine_min:0.99}", f"hydra.sweep.dir={workdir / 'sweep'}",
                      cache=cache)
    assert run.code == 2, run.stdout + run.stderr
    assert error_line(run).startswith("trtpipe: error: validate.outputs.hidden_state names no output of the model; "
                                      "its outputs, closest first: hidden, probs."), run.stderr
    assert not (workdir / "sweep").exists() and cache_entries(cache) == []


@pytest.mark.parametrize("match", ["exact", "regex"])
def test_promoted_output_names_are_accepted_and_a_typo_of_one_is_refused_early(workdir, match):
    """`mm_out` promoted through a Cast is compared as `mm_out__fp32`: a legitimate key."""
    cache = workdir / f"cache_promote_{match}"
    promote = ("stages=[sanitize,upgrade_opset,precision,promote_outputs,validate]", "validate.plot=false",
               "promote_outputs.tensors=[mm_out]" if match == "exact" else "promote_outputs.tensors=['mm_[a-z]+']",
               f"promote_outputs.match={match}")
    typo = run_trtpipe(workdir, "model.path=two.onnx", *promote, "+validate.outputs.m_out__fp32={cosine_min:0.99}",
                       cache=cache, run_name=f"promote_typo_{match}")
    assert typo.code == 2 and "validate.outputs.m_out__fp32 names no output" in error_line(typo)
    assert cache_entries(cache) == []
    right = run_trtpipe(workdir, "model.path=two.onnx", *promote, "+validate.outputs.mm_out__fp32={cosine_min:0.99}",
                        cache=cache, run_name=f"promote_{match}")
    assert right.code == 0, right.stdout + right.stderr
    assert right.statuses()["promote_outputs"] == "ran"


@pytest.mark.parametrize("rule, suggests", [
    ("{match:exact,pattern:'/block/attn/Softmx'}", "closest node names: /block/attn/Softmax,"),
    ("{match:regex,pattern:'/block/atn/.*'}", "closest node names: /block/attn/"),
    ("{match:op_type,pattern:SoftMax}", "op types in the model, closest first: Softmax, "),
])
def test_an_unmatched_rule_suggests_the_closest_and_the_override_that_allows_it(workdir, rule, suggests):
    cache = workdir / "cache_rules"
    typed = ("model.path=two.onnx", UP_TO_PRECISION, f"+precision.rules.typo={rule}")
    run = run_trtpipe(workdir, *typed, cache=cache, run_name="rule")
    assert run.code == 2, run.stdout + run.stderr
    line = error_line(run)
    assert "precision rule 'typo'" in line and suggests in line, line
    assert line.endswith("or, to go on without the rule, 'precision.on_unmatched=warn'."), line
    pasted = quoted_words(line)
    assert pasted == ["precision.on_unmatched=warn"]
    allowed = run_trtpipe(workdir, *typed, *pasted, cache=cache, run_name="rule_allowed")
    assert allowed.code == 0, allowed.stdout + allowed.stderr
    warning = next(line for line in allowed.stderr.splitlines() if "precision rule 'typo'" in line)
    assert suggests in warning and warning.endswith("(ignored: precision.on_unmatched=warn)"), warning


def recipe_description(path) -> str:
    """The recipe's comment block after `# @package _global_`, whitespace-normalised."""
    lines = path.read_text().splitlines()[1:]
    header = lines[:next(index for index, line in enumerate(lines) if not line.startswith("#"))]
    comments = [line.lstrip("#").strip() for line in header]
    return " ".join(" ".join(comments).split())


def test_help_shows_whole_recipe_descriptions_and_the_builtin_models(workdir):
    run = run_trtpipe(workdir, "--help")
    assert run.code == 0, run.stderr
    assert "…" not in run.stdout
    flat = " ".join(run.stdout.split())
    for path in sorted(recipe_dirs()[0].glob("*.yaml")):
        description = recipe_description(path)
        assert len(description) > 70 and f"{path.stem} {description}" in flat, path.stem
    builtin = next(i for i, line in enumerate(run.stdout.splitlines()) if "model.builtin=NAME" in line)
    assert [name.strip() for name in run.stdout.splitlines()[builtin + 1].split(",")] == list(BUILTIN_MODULES)
