"""The TensorRT-RTX backend: `build.backend=tensorrt_rtx` (issue 23, items 3 and 4).

NVIDIA's TensorRT-RTX is reached through its ONNX Runtime plugin execution provider,
the `onnxruntime-ep-nv-tensorrt-rtx-cu12` wheel (pinned 0.5.0, CUDA 12; it bundles the
TensorRT-RTX 1.7.1 libraries under NVIDIA's proprietary licence, so it is installed by
name, `pip install onnxruntime-ep-nv-tensorrt-rtx-cu12==0.5.0`, never vendored). The EP compiles the mixed-precision
ONNX into an `EPContext` ONNX model whose node holds the engine, ahead of time for one RTX
architecture (`nv_target_sm`). TensorRT-RTX is a different product from TensorRT 10/11:
strongly typed only, RTX GPUs (sm86/sm89/sm120/sm121) only.

Rooms:
- plugin: where the wheel is, its versions (read from files, nothing loaded).
- child: the child process that loads the EP and probes devices or compiles; its stderr is
  the EP's log. Decision: a child, not this process, because the EP logs through ONNX
  Runtime's C++ logger to file descriptor 2 (the parser's per-node lines are only there), its
  libraries (170 MB, the CUDA driver's sonames) stay out of the pipeline's process, and a
  crash of the EP is a failed build, not a dead pipeline.
- backend: the parent side (availability, cache-key facts, build).
- parser_log, plan_compare, audit: the parser's logged types against precision_plan.json.
- engine_program: the Myelin program an engine carries, read as text (linear ops, their operand
  types: still quantized or not; generated kernels with their ONNX layers and output types).
- runner: the EPContext model as validate's candidate (needs a GPU).

This package imports nothing heavy at import time; trtpipe never fakes hardware (the
stand-in driver and fake device of the tests live in bench/rtx/ and tests/).
May import: trtpipe.config, trtpipe.errors and the layers below `trt`.
"""
