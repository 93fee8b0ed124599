"""`python -m trtpipe.inspect_model MODEL`: the `trtpipe-inspect` command without its console script."""

from trtpipe.inspect_model.command import main

main()
