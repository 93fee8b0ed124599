"""The equivalent trtexec command lines: TensorRT 10.x needs --stronglyTyped; 11.x has no
precision flags at all."""

from __future__ import annotations

import shlex

from tests.trt.tiny import tiny_plan
from trtpipe.trt.seam import BuildOptions
from trtpipe.trt.trtexec import trtexec_args, trtexec_file

PROFILE = {"x": {"min": [1, 16, 64], "opt": [4, 16, 64], "max": [8, 16, 64]}}
OPTIONS = BuildOptions(profiles=(PROFILE,), builder_optimization_level=4, memory_pool_limits={"workspace": 2**30,
                       "tactic_shared_memory": 48 * 2**10, "tactic_dram": 2**30}, plugins=("/opt/p/libmy.so",))


def test_strongly_typed_on_10x_and_plain_on_11x():
    ten, eleven = (trtexec_args(major, OPTIONS, tiny_plan(), timing_cache="timing_cache/t.cache") for major in (10, 11))
    assert ten[:3] == ["trtexec", "--onnx=model.onnx", "--saveEngine=model.engine"]
    assert "--stronglyTyped" in ten and "--stronglyTyped" not in eleven
    common = ["--minShapes=x:1x16x64", "--optShapes=x:4x16x64", "--maxShapes=x:8x16x64", "--noTF32",
              "--builderOptimizationLevel=4", "--memPoolSize=workspace:1024,tacticSharedMem:0.046875",
              "--timingCacheFile=timing_cache/t.cache", "--staticPlugins=/opt/p/libmy.so",
              "--profilingVerbosity=detailed", "--exportLayerInfo=layer_info.json", "--skipInference"]
    for args in (ten, eleven):
        assert [a for a in args if a in common] == common
        assert not any(a.startswith(("--fp16", "--precisionConstraints", "--layerPrecisions", "--profile=")) for a in args)


def test_constraints_mode_lists_the_plan_on_10x_and_is_absent_on_11x():
    options = BuildOptions(precision_mode="constraints", tf32=True)
    ten = trtexec_args(10, options, tiny_plan(), float_outputs={"/ln/LayerNormalization": 1, "/proj/MatMul": 1})
    assert "--stronglyTyped" not in ten and "--noTF32" not in ten
    assert ["--fp16", "--precisionConstraints=obey"] == ten[3:5]
    assert "--layerPrecisions=/ln/LayerNormalization:fp32,/proj/MatMul:fp16" in ten
    assert "--layerOutputTypes=/ln/LayerNormalization:fp32,/proj/MatMul:fp16" in ten
    eleven = trtexec_args(11, options, tiny_plan())
    assert not any(a.startswith(("--fp16", "--precision", "--layer", "--stronglyTyped")) for a in eleven)


def test_several_profiles_are_numbered_and_odd_input_names_quoted():
    other = {"in:0": {"min": [1], "opt": [2], "max": [3]}}
    args = trtexec_args(10, BuildOptions(profiles=(other, other)), tiny_plan())
    assert args[args.index("--profile=0") + 1] == "--minShapes='in:0':1"
    assert "--profile=1" in args


def commands_in(text: str) -> list[list[str]]:
    """The commands of a trtexec file, as a shell would split them (comments dropped)."""
    code = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return [shlex.split(block.replace("\\\n", " ")) for block in code.split("\n\n") if block.strip()]


def test_the_file_has_one_command_per_major_and_marks_the_one_in_use():
    text = trtexec_file(OPTIONS, tiny_plan(), in_use="10.9.0.34", model_sha256="ab" * 32, timing_cache="t.cache")
    assert "# TensorRT 10.x  <- in use" in text and "# TensorRT 11.x\n" in text
    ten, eleven = commands_in(text)
    assert ten == trtexec_args(10, OPTIONS, tiny_plan(), timing_cache="t.cache")
    assert eleven == trtexec_args(11, OPTIONS, tiny_plan(), timing_cache="t.cache")
    deferred = trtexec_file(OPTIONS, tiny_plan(), in_use=None, model_sha256="ab" * 32)
    assert "TensorRT in use: none (the build was deferred)" in deferred and "<- in use" not in deferred


def test_a_tactic_dram_limit_trtexec_cannot_express_is_named_in_a_comment():
    text = trtexec_file(OPTIONS, tiny_plan(), in_use=None, model_sha256="ab" * 32)
    comments = [line for line in text.splitlines() if "tactic_dram" in line]
    assert comments == ["# Not expressible with trtexec (no --memPoolSize pool): "
                        f"build.memory_pool_limits.tactic_dram={2**30} bytes; trtpipe's build sets it, "
                        "these commands leave that pool unlimited."]
    assert not any("tactic_dram" in arg or "tacticDram" in arg for command in commands_in(text) for arg in command)
    without = BuildOptions(profiles=(PROFILE,), memory_pool_limits={"workspace": 2**30})
    assert "Not expressible" not in trtexec_file(without, tiny_plan(), in_use=None, model_sha256="ab" * 32)
