"""`python -m bench.no_inflation`: runs bench/no_inflation/no_inflation.py."""

import sys

from bench.no_inflation.no_inflation import main

sys.exit(main())
