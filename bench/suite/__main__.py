import sys

from bench.suite.suite import main

sys.exit(main())
