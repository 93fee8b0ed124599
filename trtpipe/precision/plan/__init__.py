"""The precision plan: the planner that orders user rules, automatic rules and the
fewest-Cast cut, the plan document (`precision_plan.json`) and the reason of each Cast.

The top room of `trtpipe.precision`: may import every room below it.
"""
