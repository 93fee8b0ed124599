"""The ONNX backend test corpus through every stage. `python -m bench.corpus`.
"""
