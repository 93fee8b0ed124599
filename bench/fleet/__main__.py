"""`python -m bench.fleet`: runs bench/fleet/fleet.py."""

import sys

from bench.fleet.fleet import main

sys.exit(main())
