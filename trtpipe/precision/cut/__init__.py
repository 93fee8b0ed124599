"""Where the boundary between low precision and FP32 falls: smoothing away isolated islands
and the fewest-Cast minimum cut (linear on long graphs) that moves cheap nodes into FP32
islands when that removes Casts.

May import `trtpipe.precision.network` and lower packages; beside `auto` (neither imports
the other), below `plan`.
"""
