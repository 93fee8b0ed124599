"""`python -m bench.wild`: runs bench/wild/wild.py."""

import sys

from bench.wild.wild import main

sys.exit(main())
