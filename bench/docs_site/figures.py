"""Regenerate the manual's pictures (docs/img/) and the figures their captions cite.

`python -m bench.docs_site` (or `--out DIR` to write elsewhere, as the test does) writes:
- `accuracy-failing.png`, `accuracy-passing.png`: validate's `accuracy.png` of the two runs of
  runs.py, as the run wrote it, then stored with a 256-colour palette (a third of the bytes, the
  picture unchanged to the eye; every picture stays under `MAX_PNG_BYTES`);
- `pipeline.svg`: the stages (pipeline_svg.py);
- `precision-plan.svg`: the passing run's plan on its first `PLAN_NODES` nodes (plan_svg.py);
- with `--record`, `bench/docs_site/results.json`: the numbers the captions cite (docs/figures.md).
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

from bench.docs_site import pipeline_svg, plan_svg, runs

REPO = Path(__file__).resolve().parents[2]
IMG = REPO / "docs" / "img"
PLAN_NODES = 15  # the graph input's Cast, the first Conv, a whole LayerNorm kept FP32 and the Conv after it
MAX_PNG_BYTES = 150 * 1024
PICTURES = ("accuracy-failing.png", "accuracy-passing.png", "pipeline.svg", "precision-plan.svg")


def small_png(source: Path, target: Path) -> None:
    """The PNG with a 256-colour palette: matplotlib's antialiasing makes tens of thousands of
    colours that nobody sees; the palette keeps the picture and drops most of the bytes."""
    from PIL import Image  # matplotlib's own dependency

    with Image.open(source) as image:
        quantized = image.convert("RGB").quantize(colors=256, dither=Image.Dither.NONE)
    buffer = io.BytesIO()
    quantized.save(buffer, format="PNG", optimize=True)
    if len(buffer.getvalue()) > MAX_PNG_BYTES:
        raise ValueError(f"{target.name} would be {len(buffer.getvalue())} bytes, over {MAX_PNG_BYTES}")
    target.write_bytes(buffer.getvalue())


def _run_figures(name: str, run_dir: Path) -> dict:
    report = json.loads((run_dir / "validate" / "validation.json").read_text())
    (candidate,) = [c for c in report["candidates"] if c["name"] == "emulated"]
    (output,) = candidate["outputs"].values()
    plan = json.loads((run_dir / "precision" / "precision_plan.json").read_text())["totals"]
    return {f"{name}.psnr_db": round(output["psnr"], 2), f"{name}.rel_l2": output["rel_l2"],
            f"{name}.fp16_nodes": plan["nodes"].get("fp16", 0), f"{name}.fp32_nodes": plan["nodes"].get("fp32", 0),
            f"{name}.casts": plan["casts_added"]}


def regenerate(out: Path) -> dict:
    """Write every picture into `out`; the figures their captions cite."""
    out.mkdir(parents=True, exist_ok=True)
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="trtpipe-docs-") as tmp:
        for name in runs.RUNS:
            run_dir = runs.run(name, Path(tmp))
            small_png(run_dir / "validate" / "accuracy.png", out / f"accuracy-{name}.png")
            figures.update(_run_figures(name, run_dir))
            if name == "passing":
                title = f"The first {PLAN_NODES} nodes of the built-in nafnet under +recipe=nafnet_fp16"
                (out / "precision-plan.svg").write_text(plan_svg.draw(
                    run_dir / "precision" / "model.onnx", run_dir / "precision" / "precision_plan.json",
                    PLAN_NODES, title))
    (out / "pipeline.svg").write_text(pipeline_svg.draw(REPO))
    return figures


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.docs_site", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=IMG, help="where the pictures go (default docs/img)")
    parser.add_argument("--record", action="store_true", help="write bench/docs_site/results.json")
    args = parser.parse_args(argv)
    figures = regenerate(args.out)
    for name in PICTURES:
        print(f"{args.out / name}: {(args.out / name).stat().st_size} bytes")
    if args.record:
        from bench.common.results import write_results

        notes = "; ".join(f"{name}: {runs.command(name)}" for name in runs.RUNS)
        write_results("docs_site", figures, command="python -m bench.docs_site --record", notes=notes)
    return 0


__all__ = ["regenerate", "main", "PICTURES", "MAX_PNG_BYTES", "small_png"]
