"""`python -m trtpipe.reduce RUN_DIR`: the `trtpipe-reduce` command without its console script."""

from trtpipe.reduce.command import main

if __name__ == "__main__":  # importing the module (tests/trt/test_seam.py imports every one) runs nothing
    main()
