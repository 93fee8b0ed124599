"""The precision search: the plan with the most low-precision FLOPs that passes, decided by trial
under the emulation.

- `fp32_set.py`: the search itself (`search_fp32_set`): its phases and the answer;
- `moves.py`: the trial log and its one move, releasing FP32 nodes chunk by chunk;
- `repair.py`: the repair of a failing automatic plan (on by default), with the same trials;
- `substitution.py`: the repair's swap of a needed heavy node for a cheaper one near it;
- `pareto.py`: the objective (FLOP share), the Pareto front, the chosen trial;
- `sensitivity.py`: ranking nodes by how much their FP16 error matters;
- `trials.py`: one trial = materialise a plan, emulate it, judge it;
- `rules_yaml.py`: the ready-to-paste `precision.rules` block it writes.
"""
