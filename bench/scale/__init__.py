"""Models over 2 GB and long graphs: time and memory per node. `python -m bench.scale` (SCALE.md).
"""
