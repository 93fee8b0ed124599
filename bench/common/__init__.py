"""Models and cases shared by the benchmarks: the encoder builders and the prepared cases
(raw export, recipe configs, sample-input specs) both tools start from, and
`t5_torch_export.py`: the real TorchScript export of a T5 v1.1 encoder that
tests/models/hf_t5_export.py reproduces without torch (needs torch and transformers).
Also the result files every family's `--record` writes (`results.py`) and the checker of the
figures README.md and docs/ cite from them (`figures.py`, docs/figures.md).
"""
