"""`python -m bench.disk`: runs bench/disk/disk.py."""

import sys

from bench.disk.disk import main

sys.exit(main())
