"""Sanitize's size bound measured: `python -m bench.no_inflation` sanitizes onnx's `light_*` test
models (every weight a `ConstantOfShape`) with the default growth rule and with
`sanitize.fold_growth_limit=null`, and records the file sizes (bench/no_inflation/results.json).
"""
