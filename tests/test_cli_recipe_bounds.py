"""Recipe bounds that mean something to the model's users (issue 21 item 5), through the real
command line: nafnet_fp16 judges an image as its users see it (8-bit levels), passes a faithful
FP16 run of a U^2-Net-like matting net that sits just under the old 56.3 dB bound, applies
bounds per output (side outputs), and still rejects naive FP16 on the built-in nafnet."""

from __future__ import annotations

import json

import pytest

from tests.cli_helpers import run_trtpipe
from tests.models.matting import OUTPUTS, write_matting_model

OLD_PSNR_BOUND = 56.3  # nafnet_fp16's bound before item 5: 0.1 dB at 40 dB against ground truth
IMAGENET = ("+data.inputs.input.low=-2.12", "+data.inputs.input.high=2.64")


def report_of(run) -> dict:
    stage = next(s for s in run.manifest["stages"] if s["name"] == "validate")
    return json.loads((run.run_dir / stage["outputs"]["report"]["path"]).read_text())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("recipe_bounds")


@pytest.fixture(scope="module")
def matting(workdir):
    # logit_gain 9: sharp masks whose large side logits FP16 rounds; the fused matte of a
    # faithful FP16 run lands at 55.0 dB (measured), 1.3 dB under the old bound.
    return write_matting_model(workdir / "u2net_like.onnx", logit_gain=9.0)


def test_nafnet_recipe_passes_a_matting_net_under_the_old_psnr_bound(workdir, matting):
    """Failed before item 5 (exit 1: `psnr 55.03 is below psnr_min 56.3`); the 8-bit criterion
    passes it: 98% of the matte's pixels land within one level, RMS under one level."""
    run = run_trtpipe(workdir, "+recipe=nafnet_fp16", f"model.path={matting}", *IMAGENET, run_name="matting")
    assert run.code == 0, run.stdout + run.stderr
    outputs = report_of(run)["candidates"][0]["outputs"]
    assert set(outputs) == set(OUTPUTS)
    fused = outputs[OUTPUTS[0]]
    assert 48.0 <= fused["psnr"] < OLD_PSNR_BOUND  # under the old bound, within one 8-bit level RMS
    assert 0.0 < fused["pixels_off_8bit"] <= 0.05
    assert all(o["argmax_agree"] is None for o in outputs.values())  # one-channel masks: no class axis
    assert "px>1lv" in run.stdout  # the console column


def test_a_bound_for_one_side_output_judges_that_output_only(workdir, matting):
    """validate.outputs.<name> sets the fused matte's own share (tighter than its 2% here):
    it fails alone, the side outputs keep the recipe's bounds and pass. The repair off: it would
    move the nodes that bound needs to FP32 (tests/test_cli_repair.py)."""
    run = run_trtpipe(workdir, "+recipe=nafnet_fp16", f"model.path={matting}", *IMAGENET, "precision.repair=false",
                      f"++validate.outputs.{OUTPUTS[0]}={{pixels_off_8bit:0.005}}", run_name="matting-tight")
    assert run.code == 1, run.stdout + run.stderr
    reasons = report_of(run)["candidates"][0]["reasons"]
    assert len(reasons) == 1 and reasons[0].startswith(f"{OUTPUTS[0]}: pixels_off_8bit ")
    assert reasons[0].endswith("exceeds pixels_off_8bit 0.005")


def test_naive_fp16_on_nafnet_is_rejected_by_the_image_criterion_too(workdir):
    """naive_fp16 keeps the transformer recipe's bounds (its contract: rejected on nafnet);
    with nafnet_fp16's 8-bit criterion alone it is rejected as well, by both of its bounds."""
    run = run_trtpipe(workdir, "+recipe=naive_fp16", "model.builtin=nafnet", run_name="naive")
    assert run.code == 1 and report_of(run)["passed"] is False
    judged_as_images = run_trtpipe(workdir, "+recipe=naive_fp16", "model.builtin=nafnet",
                                   "validate.tolerance.psnr_min=48", "validate.tolerance.pixels_off_8bit=0.05",
                                   "validate.tolerance.rel_l2=100", "validate.tolerance.cosine_min=-1",
                                   run_name="naive-images")
    assert judged_as_images.code == 1
    reasons = report_of(judged_as_images)["candidates"][0]["reasons"]
    assert any(" psnr " in f" {r} " for r in reasons) and any("pixels_off_8bit" in r for r in reasons), reasons
    restored = report_of(judged_as_images)["candidates"][0]["outputs"]["restored"]
    assert restored["pixels_off_8bit"] > 0.5  # most of the image moves by more than a level
