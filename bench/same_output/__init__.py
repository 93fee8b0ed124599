"""Differential checks: the fast paths (sanitize, upgrade_opset, precision) write the
same output as the reference path. `python -m bench.same_output`.
"""
