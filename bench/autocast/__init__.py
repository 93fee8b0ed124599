"""trtpipe against NVIDIA ModelOpt AutoCast over the whole path: Casts, accuracy (paired),
speed; the report and issue 16's done-when verdicts. `python -m bench.autocast`.
"""
