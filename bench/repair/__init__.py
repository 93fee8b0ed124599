"""The repair (issue 30): per model, what precision's repair did when the automatic plan broke a bound.

`python -m bench.repair [--record] [--torch-python PATH]`; `repair.py` runs the cases,
`t5_outliers.py` exports issue 30's T5 (needs torch and transformers).
"""
