"""Settings of the bounded fuzz run (issue 13, item 12): few examples (each test sets
max_examples), derandomized (CI is reproducible), no deadline (a case may run the
pipeline), no example database.

Decision (session 12, the suite's time): the suite's fuzz tests are a derandomized smoke sample
of each strategy (12 to 30 examples, about half of what they were), because each example runs
the pipeline or a command and the suite must stay near 5 minutes on 2 cores. The fuzzing
itself is `python -m bench.fuzz --record` (from 200 mutated graphs to 10,000 verify cases per kind, bench/fuzz/results.json),
run before a change to any property is called done."""

from hypothesis import HealthCheck, settings

BOUNDED = settings(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
