"""TEST DOUBLE at the TensorRT seam: `FakeTensorRTBackend` stands in for trtpipe.trt.backend().

It implements `trtpipe.trt.seam.TensorRTBackend` without TensorRT or a GPU: it records
every build it is asked for (ONNX path, plan, options) and returns fake engine bytes
and an inspector JSON document the test chose (10.x or 11.x schema). It never imports
`tensorrt` and never pretends to compute anything: tests that need real numbers are
marked `tensorrt` and use the real backend.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from trtpipe.trt.seam import Availability, BuildOptions, BuildResult, Environment

FAKE_ENVIRONMENT = Environment(gpu_name="Fake GPU (test double)", compute_capability="8.6",
                               driver="550.54.15", cuda="12.4", tensorrt="10.9.0.34")


@dataclass
class BuildCall:
    onnx_path: Path
    plan: Mapping
    options: BuildOptions


@dataclass
class FakeTensorRTBackend:
    inspector: dict | Callable[[Path, Mapping], dict] | None = None
    environment_facts: Environment = FAKE_ENVIRONMENT
    available: bool = True
    outputs: Callable[[Mapping[str, Any]], dict] | None = None
    builds: list[BuildCall] = field(default_factory=list)
    runs: list[tuple[Path, int]] = field(default_factory=list)
    # What `parsed_layers` returns: (layer name, metadata) pairs, as the parser would make.
    layers: list[tuple[str, str | None]] = field(default_factory=list)

    def availability(self) -> Availability:
        if self.available:
            return Availability(True)
        return Availability(False, "TensorRT is not available (FakeTensorRTBackend told so)", "use a GPU machine")

    def environment(self) -> Environment:
        return self.environment_facts

    def build(self, onnx_path: Path, plan: Mapping, options: BuildOptions) -> BuildResult:
        self.builds.append(BuildCall(Path(onnx_path), plan, options))
        digest = hashlib.sha256(Path(onnx_path).read_bytes()).hexdigest()
        document = self.inspector(onnx_path, plan) if callable(self.inspector) else self.inspector
        return BuildResult(
            engine_bytes=f"FAKE-ENGINE (test double) {digest} {options.precision_mode}".encode(),
            inspector_json=json.dumps(document if document is not None else layers_10x([])),
            log="FakeTensorRTBackend: no TensorRT was run\n",
            tensorrt_version=self.environment_facts.tensorrt or "0",
        )

    def parsed_layers(self, onnx_path: Path) -> list[tuple[str, str | None]]:
        return list(self.layers)

    def run(self, engine_path: Path, feeds: Sequence[Mapping[str, Any]]) -> list[dict]:
        if self.outputs is None:
            raise AssertionError("FakeTensorRTBackend.run: the test gave no `outputs` function")
        self.runs.append((Path(engine_path), len(feeds)))
        return [self.outputs(f) for f in feeds]


# Inspector documents, written to the documented schemas (see trtpipe/trt/inspect/inspector_json.py).

def tensor_10x(name: str, dtype_text: str, dims=(1, 16, 64)) -> dict:
    return {"Name": name, "Location": "Device", "Dimensions": list(dims), "Format/Datatype": dtype_text}


def tensor_11x(name: str, datatype: str, fmt: str = "Row major linear format (kLINEAR)", dims=(1, 16, 64)) -> dict:
    return {"Name": name, "Location": "Device", "Dimensions": list(dims), "Datatype": datatype, "Format": fmt}


def layer(name: str, layer_type: str, inputs: list, outputs: list, onnx_nodes: Sequence[str] = (),
          separator: str = "\x1e") -> dict:
    entry = {"Name": name, "LayerType": layer_type, "Inputs": inputs, "Outputs": outputs,
             "TacticValue": "0x0000000000000000", "StreamId": 0}
    if onnx_nodes:
        entry["Metadata"] = separator.join(f"[ONNX Layer: {node}]" for node in onnx_nodes)
    return entry


def layers_10x(layers: list, bindings: Sequence[str] = ("x", "y")) -> dict:
    return {"Layers": layers, "Bindings": list(bindings)}


def layers_11x(layers: list, io: Sequence[tuple[str, str, str]] = (("x", "Input", "Float"), ("y", "Output", "Float"))) -> dict:
    return {"Layers": layers, "I/O Tensors": [
        {"Name": name, "IOMode": mode, "DataType": dtype, "Dimensions": [1, 16, 64], "Location": "Device",
         "IsShapeInferenceIO": False,
         "ProfileInfo": [{"MinShape": [1, 16, 64], "OptShape": [1, 16, 64], "MaxShape": [1, 16, 64],
                          "Format": "Row major linear FP32 format (kLINEAR)"}]}
        for name, mode, dtype in io]}
