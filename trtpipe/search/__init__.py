"""The precision search: which nodes must stay FP32, decided by trial under the emulation.

- `fp32_set.py`: the search itself (`search_fp32_set`);
- `sensitivity.py`: ranking nodes by how much their FP16 error matters;
- `trials.py`: one trial = materialise a plan, emulate it, judge it;
- `rules_yaml.py`: the ready-to-paste `precision.rules` block it writes.
"""
