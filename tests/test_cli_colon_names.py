"""Issue 21, item 10: names with `:` (tf2onnx's `serving_default_input_2:0`, `Identity:0`).

Every Fix trtpipe prints for such a name is pasted into a real shell (`bash -c`, the
Fix's text as printed, quotes and backslashes included) after the command that
provoked it, and the run must get past that error. Hydra's grammar has no escapes in a
key path (`data.inputs.x:0.shape` does not parse) but reads `\\:` in a dict key, so the
fixes use the dict form: `'++data.inputs={serving_default_input_2\\:0:{shape:[1,3]}}'`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from onnx import TensorProto, helper

from trtpipe.config.override_text import dict_key, input_shape_override, input_spec_override, profiles_override

INPUT, OUTPUT = "serving_default_input_2:0", "Identity:0"
NO_BUILD = "stages=[sanitize,upgrade_opset,precision]"


def _tf2onnx_model() -> onnx.ModelProto:
    """As tf2onnx names things: `<signature>_<input>:0` in, `Identity:0` out, a dynamic batch."""
    nodes = [helper.make_node("Relu", [INPUT], ["relu:0"], name="StatefulPartitionedCall/model/relu"),
             helper.make_node("Neg", ["relu:0"], [OUTPUT], name="Identity")]
    graph = helper.make_graph(nodes, "tf2onnx", [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["unk__6", 3])],
                              [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["unk__7", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _pasted_run(workdir: Path, command: str, name: str) -> tuple[int, str]:
    """`command` (trtpipe's arguments as a user types them in bash) run by bash itself."""
    env = {**os.environ, "TRTPIPE_CACHE": str(workdir / "cache")}
    env.pop("TRTPIPE_DEBUG", None)
    line = f"{shlex.quote(sys.executable)} -m trtpipe {command} hydra.run.dir={shlex.quote(str(workdir / name))}"
    done = subprocess.run(["bash", "-c", line], cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def _fix(output: str, problem: str) -> str:
    lines = [line for line in output.splitlines() if problem in line and "Fix:" in line]
    assert len(lines) == 1, output
    return lines[0].split("Fix:", 1)[1]


def _quoted_words(fix: str) -> str:
    """What a user pastes from the Fix: its single-quoted words, exactly as printed."""
    words = re.findall(r"'[^']*'", fix)
    assert words, f"nothing to paste in: {fix}"
    return " ".join(words)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("colon_names")
    onnx.save(_tf2onnx_model(), str(directory / "tf2onnx.onnx"))
    return directory


def test_the_dynamic_input_fix_works_when_pasted(workdir):
    typed = f"model.path=tf2onnx.onnx {NO_BUILD}"
    code, output = _pasted_run(workdir, typed, "shape")
    problem = f"model input '{INPUT}' has dynamic dimensions"
    pasted = _quoted_words(_fix(output, problem))
    assert "cannot be written" not in output and "\\:0" in pasted, output
    code, output = _pasted_run(workdir, f"{typed} {pasted}", "shape_pasted")
    assert problem not in output and code == 0, output


def test_the_build_profiles_fix_works_when_pasted(workdir):
    """The build stage's "build.profiles is empty" error said the names "cannot be written on the
    command line"; its Fix now pastes, and alone gives the sample shape too (profile 0's opt).
    `build.require_profiles=true` keeps that error (without it the sample shape is the profile)."""
    typed = "model.path=tf2onnx.onnx stages=[sanitize,upgrade_opset,precision,build] build.require_profiles=true"
    code, output = _pasted_run(workdir, typed, "profiles")
    assert "cannot be written" not in output
    problem = "build.profiles is empty"
    if problem not in output:  # the precision stage stops first: paste its Fix, then look again
        typed += " " + _quoted_words(_fix(output, "has dynamic dimensions"))
        code, output = _pasted_run(workdir, typed, "profiles_shape")
    pasted = _quoted_words(_fix(output, problem))
    assert "cannot be written" not in output and "\\:0" in pasted, output
    code, output = _pasted_run(workdir, f"{typed} {pasted}", "profiles_pasted")
    assert problem not in output and code == 0, output  # the build is deferred without TensorRT: success


def test_the_sample_shape_fix_alone_reaches_the_end(workdir):
    """Without build.require_profiles the escaped sample-shape Fix is the build's profile too."""
    typed = "model.path=tf2onnx.onnx stages=[sanitize,upgrade_opset,precision,build]"
    code, output = _pasted_run(workdir, typed, "shape_alone")
    typed += " " + _quoted_words(_fix(output, "has dynamic dimensions"))
    code, output = _pasted_run(workdir, typed, "shape_alone_pasted")
    assert code == 0 and "profile from the sample data (min = opt = max): serving_default_input_2:0 [1,3]" in output


def test_the_output_name_fix_works_when_pasted(workdir):
    """`validate.outputs.Identity` for tf2onnx's `Identity:0`: the Fix removes the wrong key and sets
    the same tolerance under the real name, escaped."""
    shape = input_shape_override(INPUT, [1, 3])
    typed = (f"model.path=tf2onnx.onnx stages=[sanitize,upgrade_opset,precision,validate] validate.plot=false "
             f"{shape} '+validate.outputs.Identity={{cosine_min:0.99}}'")
    code, output = _pasted_run(workdir, typed, "outputs")
    problem = "validate.outputs.Identity names no output"
    pasted = _quoted_words(_fix(output, problem).split(" paste ", 1)[1])  # "if you meant 'Identity:0', paste ..."
    assert "Identity\\:0" in pasted, output
    code, output = _pasted_run(workdir, f"{typed} {pasted}", "outputs_pasted")
    assert problem not in output and code == 0, output


def test_the_integer_range_fix_works_when_pasted(workdir):
    """tf2onnx's BERT inputs are `input_ids:0`, int64 with dynamic dims: the Fix gives range and shape."""
    nodes = [helper.make_node("Cast", ["input_ids:0"], ["ids_float:0"], name="Cast", to=TensorProto.FLOAT),
             helper.make_node("Relu", ["ids_float:0"], ["Identity:0"], name="Identity")]
    graph = helper.make_graph(nodes, "ids", [helper.make_tensor_value_info("input_ids:0", TensorProto.INT64,
                                                                           ["unk__1", "unk__2"])],
                              [helper.make_tensor_value_info("Identity:0", TensorProto.FLOAT, ["unk__1", "unk__2"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(workdir / "ids.onnx"))
    typed = f"model.path=ids.onnx {NO_BUILD}"
    code, output = _pasted_run(workdir, typed, "ids")
    problem = "integer model inputs have no sample range"
    pasted = _quoted_words(_fix(output, problem))
    assert "input_ids\\:0" in pasted, output
    code, output = _pasted_run(workdir, f"{typed} {pasted}", "ids_pasted")
    assert problem not in output and code == 0, output


@pytest.mark.parametrize("name", [INPUT, "x:0", "input.1", "a b", "x=1", "p(0)", "x,y", "back\\slash", "a/b:0"])
def test_hydra_reads_each_override_back_as_the_name(name):
    parser = OverridesParser.create()

    def parsed(override: str):
        return parser.parse_overrides([shlex.split(override)[0]])[0].value()

    assert parsed(input_shape_override(name, [1, 3])) in ({name: {"shape": [1, 3]}}, [1, 3])
    assert parsed(input_spec_override(name, {"low": 0, "high": 2})) in ({name: {"low": 0, "high": 2}}, {"low": 0, "high": 2})
    assert parsed(profiles_override({name: [1, 3]})) == [{name: {"min": [1, 3], "opt": [1, 3], "max": [1, 3]}}]


@pytest.mark.parametrize("name", ["x'0", 'x"0', "x#0", "x;0", "ünï"])
def test_a_name_no_text_can_spell_gets_no_override(name):
    assert dict_key(name) is None
    assert input_shape_override(name, [1]) is None and profiles_override({name: [1]}) is None
