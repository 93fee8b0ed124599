"""The test suite's own duration, timed the way the README runs it (see suite.py)."""
