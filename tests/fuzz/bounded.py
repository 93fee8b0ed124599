"""Settings of the bounded fuzz run (issue 13, item 12): few examples (each test sets
max_examples), derandomized (CI is reproducible), no deadline (a case may run the
pipeline), no example database."""

from hypothesis import HealthCheck, settings

BOUNDED = settings(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
