"""`trtpipe-inspect MODEL` against `polygraphy inspect model MODEL`, on the same files.
`python -m bench.inspect [--record]`.
"""
