"""Models and cases shared by the benchmarks: the encoder builders and the prepared cases
(raw export, recipe configs, sample-input specs) both tools start from.
"""
