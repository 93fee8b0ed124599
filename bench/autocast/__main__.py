"""`python -m bench.autocast`: runs bench/autocast/precision_vs_autocast.py."""

import sys

from bench.autocast.precision_vs_autocast import main

sys.exit(main())
