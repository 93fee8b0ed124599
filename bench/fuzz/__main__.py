"""`python -m bench.fuzz`: runs bench/fuzz/fuzz.py."""

import sys

from bench.fuzz.fuzz import main

sys.exit(main())
