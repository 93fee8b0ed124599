"""`python -m bench.search`: runs bench/search/search.py."""

import sys

from bench.search.search import main

sys.exit(main())
