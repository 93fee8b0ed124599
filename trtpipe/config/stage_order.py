"""The one order in which stages may be listed.

Decision: `stages` may be any subset of the stages, but always in this order,
refused before any stage runs otherwise, with the listed stages in the order
that works. Each later stage assumes what the earlier ones did: precision
plans on the sanitized, upgraded graph (an upgrade after it would convert, and
fuse LayerNorms in, a graph already cast to FP16, and the plan would no longer
name its nodes); promote_outputs exposes tensors of the mixed-precision graph
(as `<tensor>__fp32`), so it follows precision; build compiles the final
graph; validate judges what the run produced, so nothing that changes the
model may follow it. The consumes/produces check (pipeline.plan_stages) alone
let `[sanitize,precision,upgrade_opset]` and `[...,validate,promote_outputs]`
run, each producing a result that no stage judged or planned.
"""

from __future__ import annotations

from trtpipe.errors import UserError

STAGE_ORDER = ("sanitize", "upgrade_opset", "precision", "promote_outputs", "build", "validate")


def check_stage_order(names: list[str]) -> None:
    """UserError naming the first stage out of order and the list in the order that works."""
    known = [name for name in names if name in STAGE_ORDER]
    working = sorted(known, key=STAGE_ORDER.index)
    if known == working:
        return
    for earlier, later in zip(known, known[1:]):
        if STAGE_ORDER.index(earlier) > STAGE_ORDER.index(later):
            raise UserError(
                f"'stages' lists '{later}' after '{earlier}', an order that cannot work ({_reason(earlier, later)})",
                f"'stages=[{','.join(working)}]'",  # quoted: brackets are a glob in a shell
            )


def _reason(earlier: str, later: str) -> str:
    if earlier == "validate":
        return "validate must judge the final model; nothing may change it afterwards"
    if later in ("sanitize", "upgrade_opset"):
        return f"{later} rewrites the graph that {earlier} works on"
    return f"{later} must run before {earlier}"
