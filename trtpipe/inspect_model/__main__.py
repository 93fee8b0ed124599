"""`python -m trtpipe.inspect_model MODEL`: the `trtpipe-inspect` command without its console script."""

from trtpipe.inspect_model.command import main

if __name__ == "__main__":  # importing the module (tests/trt/test_seam.py imports every one) runs nothing
    main()
