"""`python -m bench.inspect`: runs bench/inspect/inspect_timing.py."""

import sys

from bench.inspect.inspect_timing import main

sys.exit(main())
