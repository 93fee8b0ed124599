"""`trtpipe-inspect MODEL`: what is in an ONNX model and what each stage would do with it, with no stage run.

Like `polygraphy inspect model`, plus trtpipe's own reading: the integer input ranges the
precision stage would read, the LayerNorms upgrade_opset would fuse, the ops TensorRT's parser
list refuses. Nothing is written (no cache entry, no run directory).

Modules: `model_facts` (inputs, opset, histogram, weights, subgraphs, authored precision),
`stage_preview` (sanitize, upgrade_opset, precision, the parser check), `report_text` (the
console lines), `command` (the command line). Imports: any layer below the entry points
(graph, numerics, trt.parser, onnxmodel); nothing imports this package but the `trtpipe` CLI.
"""
