"""The stage runner: stage order, the pipeline over the cache (trtpipe.cache), the source
snapshot a stage reads, the manifest, the console and the run directory's bookkeeping."""
