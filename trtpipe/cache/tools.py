"""Versions of the tools that can change an artifact, read without importing them.

Decision: `importlib.metadata` reads versions from package metadata, so asking for
TensorRT's version never imports TensorRT (the seam rule) and costs milliseconds.
Each distribution is looked up once per process (a run asks ~40 times: every stage's
key, the manifest); an installed version does not change under a running process.
"""

from __future__ import annotations

import platform
import sys
from functools import lru_cache
from importlib import metadata

import trtpipe

# Distributions whose version goes into the manifest; stages pick their subset for keys.
RECORDED_DISTRIBUTIONS = (
    "onnx",
    "onnxruntime",
    "onnx-graphsurgeon",
    "polygraphy",
    "numpy",
    "protobuf",
    "hydra-core",
    "omegaconf",
    "tensorrt",
)


@lru_cache(maxsize=None)
def distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def tool_versions(names: tuple[str, ...] = RECORDED_DISTRIBUTIONS) -> dict[str, str | None]:
    return {name: distribution_version(name) for name in names}


def environment_record() -> dict:
    return {
        "trtpipe": trtpipe.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "tools": tool_versions(),
    }
