"""The content-addressed artifact cache: keys (hashing, key shape), entries and their
schema, the cache folder and its home, publishing, the source-digest memo, file helpers,
and the explanation of why a stage re-ran.

A low layer: the runner, the stages that publish artifacts, the source digests and the
TensorRT timing cache use it; it imports only `trtpipe.errors` and `trtpipe.onnxmodel`
(plus the stage registry, lazily, to explain a re-run).
"""
