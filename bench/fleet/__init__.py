"""bench/fleet: N simulated builders and one S3 server on loopback, a shared sweep, with and without
the remote cache tier (issue 34, item 4). `python -m bench.fleet [--record]`."""
