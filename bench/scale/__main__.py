"""`python -m bench.scale`: runs bench/scale/scale.py."""

import sys

from bench.scale.scale import main

sys.exit(main())
