"""Record the flags of `trtexec --help` per TensorRT release, from NVIDIA/TensorRT's source.

    git clone https://github.com/NVIDIA/TensorRT && python -m bench.trt.trtexec_flags TensorRT

Writes tests/trt/data/trtexec_flags.json, which tests/trt/test_trtexec_flags.py checks the
generated trtexec commands against. trtexec prints its help from the help() functions of
samples/common/sampleOptions.cpp: every help line starts with `  --<flag>`; the
--memPoolSize pools come from its `pool ::=` line, the size unit from its `poolfmt ::=`
line, what a size's base-2 suffix scales from the parser (10.0: `stringToValue<double>` is
`std::stod(option) * getUnitMultiplier(option)` and the result is read as MiB, so `1G` is
2^30 MiB; 10.1+ appends a default `M` and divides by 1 MiB, so `1G` is 1 GiB), the
--profilingVerbosity modes from its line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

PATH = "samples/common/sampleOptions.cpp"
# Release -> the commit of NVIDIA/TensorRT's release (git log --grep=Release).
RELEASES = {"10.0": "d3107c88", "10.16": "52399f55", "11.0": "771d8efd", "11.1": "82d1dca8"}
_SUFFIX_IN_BYTES = re.compile(r"stringToValue<double>\(addDefaultUnitSuffixIfNotSpecified\(\w+, 'M'\)\)")
OUT = Path(__file__).resolve().parents[2] / "tests" / "trt" / "data" / "trtexec_flags.json"


def git(repo: Path, *args: str) -> str:
    return subprocess.check_output(["git", "-C", str(repo), *args], text=True)


def release_facts(repo: Path, short: str) -> dict:
    commit = git(repo, "rev-parse", short).strip()
    text = git(repo, "show", f"{commit}:{PATH}")
    poolfmt = re.search(r"poolfmt ::= (pool:\w+)", text).group(1)
    verbosity = re.search(r"--profilingVerbosity=mode\s+Specify profiling verbosity. mode ::= ([\w|]+)", text).group(1)
    return {
        "commit": commit,
        "release": git(repo, "log", "-1", "--format=%s", commit).strip(),
        "flags": sorted(set(re.findall(r'"\s+--([A-Za-z0-9]+)', text))),
        "memPoolSize_pools": re.findall(r'"(\w+)"', re.search(r'pool ::= (.*?)\)"', text).group(1)),
        "memPoolSize_unit": poolfmt,
        # What `1G` means: "bytes" (1 GiB) where the size gets a default M suffix and is divided by
        # 1 MiB; "MiB" (2^30 MiB) where the suffix's byte multiplier scales a count read as MiB (10.0).
        "memPoolSize_suffix_scales": "bytes" if _SUFFIX_IN_BYTES.search(text) else "MiB",
        "profilingVerbosity": verbosity.split("|"),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a clone of NVIDIA/TensorRT with its history")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    document = {
        "source": {"repository": "NVIDIA/TensorRT", "path": PATH, "licence": "Apache-2.0",
                   "made": datetime.date.today().isoformat(), "method": __doc__.split("\n\n")[2].replace("\n", " ")},
        "versions": {version: release_facts(args.repo, short) for version, short in RELEASES.items()},
    }
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
