"""TensorRT-RTX as an oracle: the real ONNX parser and builder of NVIDIA's TensorRT-RTX
1.7.1 (the pinned `onnxruntime-ep-nv-tensorrt-rtx-cu12` wheel) read every shipped recipe's
precision output and build an engine ahead of time for an RTX architecture (sm89 by
default), on a machine with no GPU and no NVIDIA driver, and so does each model of the wild
corpus (bench/wild) with its fitting recipe: `python -m bench.rtx` (= `python -m bench.rtx_check`,
bench/rtx/check.py; table in bench/rtx/RTX.md). `python -m bench.rtx --ops` measures the parser
op by op and element type by element type (bench/rtx/ops.py) into
trtpipe/trt/parser/onnx_parser_ops_measured/ and docs/rtx-parser.md (issue 23).
bench/rtx/quantized_layers.py builds a quantized model and trtpipe's output of it and compares the
linear ops of the two engines (still INT8/FP8; planned FP16 not run FP32; issue 31, item 3).

What is real: the parser, the builder, the engine bytes (an EPContext model).
What is FAKED, and only here, in a child process: stand-in CUDA driver, NVML and CUDA
runtime libraries (standins.py: "no device", except one compute-capability 8.9 device in
the runtime) and a fake /sys/class/drm GPU entry in a private mount namespace
(sandbox.py), because the plugin neither loads nor lists a device without them. No engine
is executed. trtpipe itself never fakes hardware.
"""
