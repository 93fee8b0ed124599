"""ONNX model files and protos: load and save, external data on disk (and which files it
may be read from: external_files), value_info, JSON metadata, operator domains, input dims
and subgraph walks.

The bottom layer of trtpipe (above `trtpipe.errors` only): the graph passes, the
numerics, the cache's hashing and the precision stage all read models through it.
"""
