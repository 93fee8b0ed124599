"""`python -m bench.rtx_check`, the name issue 23 gives the oracle: an alias of `python -m bench.rtx`
(bench/rtx/check.py), same options and output."""
