"""Every flag of the generated trtexec commands exists in `trtexec --help` of the TensorRT releases
that command is for (flag lists in tests/trt/data/trtexec_flags.json, taken from the help text in
NVIDIA/TensorRT samples/common/sampleOptions.cpp at each release's commit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trt.test_trtexec import commands_in
from tests.trt.tiny import tiny_plan
from trtpipe.trt.seam import BuildOptions
from trtpipe.trt.trtexec import trtexec_file

FLAGS = json.loads((Path(__file__).parent / "data" / "trtexec_flags.json").read_text())
RELEASES = FLAGS["versions"]
PROFILE = {"x": {"min": [1, 16, 64], "opt": [4, 16, 64], "max": [8, 16, 64]}}
POOLS = {"workspace": 3 * 2**30, "dla_managed_sram": 2**20, "dla_local_dram": 2**30, "dla_global_dram": 2**29,
         "tactic_shared_memory": 48 * 2**10, "tactic_dram": 2**30}
OPTIONS = {
    "strongly_typed": BuildOptions(profiles=(PROFILE, PROFILE), builder_optimization_level=5,
                                   memory_pool_limits=POOLS, plugins=("/opt/p/libmy.so",)),
    "constraints": BuildOptions(precision_mode="constraints", tf32=True, profiles=(PROFILE,)),
}


def check(command: list[str], release: str) -> list[str]:
    """Problems of one command against one release's help text."""
    facts = RELEASES[release]
    problems = []
    for arg in command[1:]:
        flag, _, value = arg[2:].partition("=")
        if flag not in facts["flags"]:
            problems.append(f"--{flag} is not a trtexec {release} flag")
        if flag == "memPoolSize":
            for spec in value.split(","):
                pool, _, size = spec.partition(":")
                if pool not in facts["memPoolSize_pools"]:
                    problems.append(f"pool {pool} unknown to trtexec {release}")
                float(size)  # MiB, no suffix: 10.0 would read `1G` as 2^30 MiB, 10.1+ as 1 GiB
        if flag == "profilingVerbosity" and value not in facts["profilingVerbosity"]:
            problems.append(f"--profilingVerbosity={value} unknown to trtexec {release}")
    return problems


def test_the_recorded_help_texts_are_the_releases_trtpipe_supports():
    assert set(RELEASES) >= {"10.0", "10.16", "11.0", "11.1"}
    assert FLAGS["source"]["repository"] == "NVIDIA/TensorRT"
    assert "fp16" in RELEASES["10.16"]["flags"] and "fp16" not in RELEASES["11.0"]["flags"]
    assert "precisionConstraints" not in RELEASES["11.1"]["flags"] and "noTF32" in RELEASES["11.1"]["flags"]
    # 10.0: std::stod(option) * getUnitMultiplier(option), read as MiB (1G = 2^30 MiB); 10.1+: bytes.
    assert RELEASES["10.0"]["memPoolSize_suffix_scales"] == "MiB"
    assert {RELEASES[v]["memPoolSize_suffix_scales"] for v in ("10.16", "11.0", "11.1")} == {"bytes"}


@pytest.mark.parametrize("mode", sorted(OPTIONS))
def test_every_flag_of_the_generated_commands_is_in_trtexec_help(mode):
    text = trtexec_file(OPTIONS[mode], tiny_plan(), in_use=None, model_sha256="ab" * 32,
                        timing_cache="timing_cache/gpu.cache", model="../precision/model.onnx",
                        float_outputs={"/ln/LayerNormalization": 1, "/proj/MatMul": 1})
    ten, eleven = commands_in(text)
    for command, major in ((ten, "10"), (eleven, "11")):
        for release in (r for r in RELEASES if r.split(".")[0] == major):
            assert check(command, release) == [], (mode, release)
    assert "--memPoolSize=workspace:3072,dlaSRAM:1,dlaLocalDRAM:1024,dlaGlobalDRAM:512,tacticSharedMem:0.046875" \
        in ten or mode == "constraints"


def test_the_check_fails_on_a_removed_flag():
    assert check(["trtexec", "--fp16", "--memPoolSize=workspace:1024,tacticDRAM:1"], "11.1") == \
        ["--fp16 is not a trtexec 11.1 flag", "pool tacticDRAM unknown to trtexec 11.1"]
