"""`python -m bench.rtx_check`: runs bench/rtx/check.py (the same as `python -m bench.rtx`)."""

import sys

from bench.rtx.check import main

sys.exit(main())
