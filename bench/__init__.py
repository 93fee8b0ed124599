"""Benchmarks, one folder per family (README.md lists them and their commands)."""
