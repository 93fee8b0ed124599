"""`python -m trtpipe.reduce RUN_DIR`: the `trtpipe-reduce` command without its console script."""

from trtpipe.reduce.command import main

main()
