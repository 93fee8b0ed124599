"""`python -m bench.rtx`: runs bench/rtx/check.py."""

import sys

from bench.rtx.check import main

sys.exit(main())
