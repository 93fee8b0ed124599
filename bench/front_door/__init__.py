"""The README's front door timed: install-free commands as a new user runs them.
`python -m bench.front_door`.
"""
