"""`python -m bench.same_output`: runs bench/same_output/same_output.py."""

import sys

from bench.same_output.same_output import main

sys.exit(main())
