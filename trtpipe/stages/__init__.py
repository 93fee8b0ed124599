"""The stages, by the name used in the `stages` config list."""

from __future__ import annotations

from trtpipe.errors import UserError
from trtpipe.stages.base import Stage
from trtpipe.stages.build import BuildEngine
from trtpipe.stages.precision import PlanPrecision
from trtpipe.stages.promote_outputs import PromoteOutputs
from trtpipe.stages.sanitize import SanitizeModel
from trtpipe.stages.upgrade_opset import UpgradeOpset
from trtpipe.stages.validate import ValidateAccuracy

STAGES: dict[str, type[Stage]] = {stage.name: stage for stage in (SanitizeModel, UpgradeOpset, PlanPrecision, PromoteOutputs, BuildEngine, ValidateAccuracy)}


def stage_class(name: str) -> type[Stage]:
    try:
        return STAGES[name]
    except KeyError:
        raise UserError(
            f"'stages' lists '{name}', which is not a trtpipe stage",
            f"use stage names from: {', '.join(STAGES)}",
        ) from None
