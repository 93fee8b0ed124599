"""`python -m bench.repair`: runs bench/repair/repair.py."""

import sys

from bench.repair.repair import main

sys.exit(main())
