"""`trtpipe reduce RUN_DIR` (`trtpipe-reduce`): a failing run's smallest failing subgraph, for a bug report.

Like `polygraphy debug reduce`, but automatic: the run's own reference, plan and bounds say what
"fails" means, so no script marks good and bad. Modules: `failing_run` (what the run directory
says: the two models, the sample inputs, the output and the bound it broke), `subgraph` (a window
of the candidate's nodes as a model of its own, fed with the reference's values), `shrink` (the
search for the smallest window that still breaks the bound), `command` (the command line and the
files it writes). Imports: any layer below the entry points (validate, numerics, onnxmodel,
runner's manifest reading); nothing imports this package but the `trtpipe` CLI.
"""
