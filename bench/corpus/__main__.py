"""`python -m bench.corpus`: runs bench/corpus/corpus.py."""

import sys

from bench.corpus.corpus import main

sys.exit(main())
