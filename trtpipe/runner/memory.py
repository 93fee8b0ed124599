"""Give a finished stage's memory back before the next stage starts.

Decision (measured on a 2 GB model, bench/scale/SCALE.md): after the sanitize pass
returned, 7.9 GiB were still resident. `gc.collect()` freed the reference
cycles (onnx-graphsurgeon graphs are node <-> tensor cycles holding protobuf
messages) and brought it to 5.9 GiB; glibc's `malloc_trim(0)` returned the
freed heap it was keeping (protobuf's blocks sit below the mmap threshold)
and brought it to 0.1 GiB. Without both, the next stage's peak sits on top.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


def release_memory() -> None:
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
