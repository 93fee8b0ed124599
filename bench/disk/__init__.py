"""Disk in proportion (issue 33, item 1): `python -m bench.disk` runs the default pipeline on a
generated 117 MB model and records what its run directory and the cache hold, each inode once
(bench/disk/results.json).
"""
