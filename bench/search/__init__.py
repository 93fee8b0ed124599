"""The precision search measured: `python -m bench.search` runs `transformer_fp16_search` on the
built-in models the docs' search table quotes (docs/precision.md) and records, per case, the
automatic plan, the chosen trial and the search's seconds (bench/search/results.json).
"""
