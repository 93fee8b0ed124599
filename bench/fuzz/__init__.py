"""Fuzzing the command line, inputs and graphs; 0 defects expected. `python -m bench.fuzz`.
"""
