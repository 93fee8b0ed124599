"""Memos of work a repeated run would otherwise redo before its first stage, each keyed on
everything that can change the answer (so a change is a miss, never a stale answer):

- compose.py: the composed config of a single run (Hydra's composition, ~half a cached run);
- model_inputs.py: what the model states about its inputs (ranges and shapes of generated
  sample inputs), per model digest: a cached run then loads no ONNX model.

May import config and cache (below it); used by single_run.py and data.py.
"""
