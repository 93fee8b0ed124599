"""TEST DOUBLE launcher: run a script with FakeTensorRTBackend as trtpipe's TensorRT backend.

    python -m tests.trt.run_with_fake_tensorrt build/build_on_gpu.py [ARGS...]

What a GPU machine does with `python build/build_on_gpu.py`, except that `trtpipe.trt.backend()`
returns the double, whose engine inspector reports every plan node as one layer running in the
plan's precision. After the script, one line `FAKE-BUILDS <json>` lists the ONNX files it built.
"""

from __future__ import annotations

import json
import runpy
import sys

import trtpipe.trt
from tests.trt.fake_tensorrt import FakeTensorRTBackend, layer, layers_10x, tensor_10x

DTYPE_TEXT = {"fp32": "Row major linear FP32", "fp16": "Row major linear FP16"}


def plan_as_layers(onnx_path, plan) -> dict:
    layers = [layer(node["name"], "Fake", [], [tensor_10x(f"{node['name']}:out", DTYPE_TEXT[node["precision"]])],
                    onnx_nodes=[node["name"]])
              for node in plan.get("nodes", []) if node.get("precision") in DTYPE_TEXT]
    return layers_10x(layers)


def main() -> None:
    backend = FakeTensorRTBackend(inspector=plan_as_layers)
    trtpipe.trt.backend = lambda: backend
    sys.argv = sys.argv[1:]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        print("FAKE-BUILDS " + json.dumps([str(call.onnx_path) for call in backend.builds]), flush=True)


if __name__ == "__main__":
    main()
