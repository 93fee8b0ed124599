"""The parsed network: nodes as TensorRT's parser sees them, indexes, names, element
types, FLOPs, and the user's precision rules resolved against it.

The bottom room of `trtpipe.precision`: imports only `trtpipe.graph`, `trtpipe.numerics`,
`trtpipe.data` and `trtpipe.errors`, never another precision room.
"""
