"""`python -m trtpipe` is the `trtpipe` command."""

from trtpipe.cli import main

main()
