"""The automatic precision rules, decided from a reference run: magnitude range and
boundaries (both ends of FP16's range: underflow.py), constants and their flush effect,
normalization groups and their inputs, Q/DQ scales below FP16's normal range, masked
additions and saturating chains (overflow that only saturates a Tanh/Sigmoid) and control
flow (the fewest-Cast cut is in `cut/`).

May import `trtpipe.precision.network`, `trtpipe.precision.materialize` and lower packages;
never `plan`.
"""
