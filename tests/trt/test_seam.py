"""The seam: no trtpipe module imports `tensorrt` when imported, and without TensorRT
the real backend says exactly what is missing and what to install."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

import trtpipe

# Imports every trtpipe module in a fresh interpreter. A meta-path finder records every
# attempt to import `tensorrt` (even where it is not installed, as on CI) and the
# stack that made it, then sys.modules is checked too (on GPU machines it is installed).
_WALK = textwrap.dedent(r"""
    import importlib, importlib.abc, json, pkgutil, sys, traceback
    attempts = []

    class RecordTensorRTImports(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("tensorrt", "tensorrt_rtx", "tensorrt_bindings", "tensorrt_libs"):
                attempts.append({"name": name, "stack": "".join(traceback.format_stack(limit=15))})
            return None

    sys.meta_path.insert(0, RecordTensorRTImports())
    import trtpipe
    modules, errors = [], {}
    for info in pkgutil.walk_packages(trtpipe.__path__, "trtpipe."):
        if info.name == "trtpipe.__main__":  # running it is the CLI
            continue
        modules.append(info.name)
        try:
            importlib.import_module(info.name)
        except Exception as error:
            errors[info.name] = f"{type(error).__name__}: {error}"
        if attempts:
            break
    loaded = sorted(m for m in sys.modules if m.split(".")[0].startswith("tensorrt"))
    print(json.dumps({"modules": modules, "errors": errors, "attempts": attempts, "loaded": loaded}))
""")


def test_importing_every_trtpipe_module_never_imports_tensorrt():
    done = subprocess.run([sys.executable, "-c", _WALK], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "trtpipe.trt.builder" in report["modules"] and "trtpipe.stages.build" in report["modules"]
    assert not report["attempts"], "a module imports tensorrt at import time:\n" + report["attempts"][0]["stack"]
    assert report["loaded"] == []
    assert report["errors"] == {}


def test_selecting_the_backend_imports_nothing_heavy():
    code = ("import sys, trtpipe.trt as t; b = t.backend(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorrt', 'polygraphy', 'onnx')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="TensorRT is installed here")
def test_without_tensorrt_the_error_names_the_module_the_cause_and_the_fix():
    from trtpipe.trt import backend
    from trtpipe.trt.availability import TensorRTUnavailable, import_tensorrt

    availability = backend().availability()
    assert not availability.available
    assert "'tensorrt'" in availability.problem and "ModuleNotFoundError" in availability.problem
    assert "pip install tensorrt-cu13" in availability.fix and "pip install tensorrt-cu12" in availability.fix
    assert "trtpipe[" not in availability.fix  # trtpipe is not on the package index: no extra to name
    with pytest.raises(TensorRTUnavailable, match="cannot be imported.*Fix: install TensorRT"):
        import_tensorrt()


def test_environment_without_tensorrt_or_gpu_is_what_can_be_known_never_an_error(monkeypatch):
    from trtpipe.trt.environment import cuda_device_count, detect_environment, visible_device_filter

    facts = detect_environment().key_facts()
    assert set(facts) == {"gpu_name", "compute_capability", "driver", "cuda", "tensorrt"}
    if importlib.util.find_spec("tensorrt") is None:
        assert facts["tensorrt"] is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_device_filter() == "" and cuda_device_count() == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert visible_device_filter() == "1"


def test_trtpipe_trt_is_the_only_package_naming_tensorrt_in_an_import_statement():
    import re
    from pathlib import Path

    root = Path(trtpipe.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if "trt" not in p.relative_to(root).parts[:1]
                 and re.search(r"^\s*(import tensorrt|from tensorrt)", p.read_text(), re.MULTILINE)]
    assert offenders == []
