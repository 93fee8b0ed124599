"""The names of ONNX's default operator domain: `""` and its alias `"ai.onnx"`."""

DEFAULT_DOMAINS = ("", "ai.onnx")
