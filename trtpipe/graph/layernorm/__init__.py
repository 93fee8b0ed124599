"""Decomposed LayerNorm forms and their fusion into `LayerNormalization`: the pattern
language, one rule per form (pattern, check, rewrite) and the fusion pass.

May import every other room of `trtpipe.graph`; nothing in `graph` imports it but `upgrade`.
"""
