"""`python -m bench.front_door`: runs bench/front_door/front_door.py."""

import sys

from bench.front_door.front_door import main

sys.exit(main())
