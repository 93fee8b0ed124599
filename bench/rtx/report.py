"""bench/rtx/RTX.md: the oracle's table, written by `python -m bench.rtx` (never by hand)."""
from __future__ import annotations

from pathlib import Path


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _types(r) -> str:
    c = r.comparison
    if c is None:
        return ""
    if c.no_node_lines:
        return "none compared (no per-node line in the log)"
    return (f"{c.as_planned}/{c.planned}" + (f", {c.in_bodies} in bodies" if c.in_bodies else "")
            + (f" (+{c.inserted_as_written}/{c.inserted} Casts)" if c.inserted else ""))


def _verdict(r) -> str:
    if r.verdict == "built":
        return "parsed, built"
    return r.verdict


def _trtpipe(r) -> str:
    t = r.trtpipe
    if t is None:
        return ""
    text = f"exit {t.exit_code}, build {t.build_status or '?'}"
    if t.refused_ops:
        text += "; op check refused " + ", ".join(t.refused_ops)
    if t.plan_type_findings:
        text += "; plan-type warnings: " + ", ".join(t.plan_type_findings)
    return text


def _counts(r) -> str:
    if r.as_planned:
        return "yes"
    if r.refusal_predicted:
        return f"yes (refusal of {r.refused_op} predicted by trtpipe)"
    return "**no**"


def markdown(results, target: str, seconds: float, repo: Path) -> str:
    from bench.rtx import wheel
    from bench.wild.wild_report import environment

    env = environment(repo)
    good = sum(r.counts for r in results)
    out = ["# TensorRT-RTX oracle: trtpipe's output through the real parser and builder", "",
           f"Run {env['date']} on trtpipe code of commit `{env['commit']}` (last commit touching `trtpipe/`; "
           f"checkout `{env['head']}` on branch `{env['branch']}`), onnx {env['onnx']}, onnxruntime "
           f"{env['onnxruntime']}, {wheel.NAME} {wheel.VERSION} (TensorRT-RTX 1.7.1), target `{target}`; "
           f"`python -m bench.rtx_check --target {target}`, {len(results)} models in {seconds:.0f} s on a 2-core "
           f"machine without a GPU (stand-in CUDA libraries, a fake DRM device: bench/rtx/__init__.py).", "",
           "Per model: trtpipe's CLI with the model's config (sanitize, upgrade_opset, precision, build; the "
           "build stage's op check runs, then the build defers: no TensorRT here), then precision/model.onnx "
           "compiled ahead of time by the TensorRT-RTX EP. `types as planned`: plan nodes whose input and "
           "output element types, as the parser logged them, are those precision_plan.json implies "
           "(trtpipe/trt/rtx/plan_compare.py), If/Loop/Scan body nodes included (`N in bodies`); a plan node the "
           "model or the parser's log lacks is not as planned; Casts trtpipe inserted are checked against their written types. "
           "`engine s`: TensorRT-RTX's engine generation; `compile s`: the whole EP compile. "
           "A refused model counts only when trtpipe's own op check refused it first, naming the same op. "
           "A model the parser took whose engine the builder did not build is `parsed, refused by the builder`, "
           "with the builder's line as the reason: the EP also parses each If body alone while it decides what "
           "it claims (an outer-scope value of unknown shape then arrives as a rank-0 input), and a parser "
           "error of such a parse is not the model's. The builder's line names no op: it is attributed to a "
           "measured builder limit (trtpipe/trt/parser/builder_limits.py) when the line carries the limit's "
           "signature and the model holds a node under it.", "",
           "| model | source | config | RTX verdict | reason (refusals, in full) | engine s | compile s "
           "| types as planned | trtpipe | counts |",
           "|---|---|---|---|---|---:|---:|---|---|---|"]
    for r in results:
        s = r.subject
        engine = "" if r.engine_seconds is None else f"{r.engine_seconds:.2f}"
        compile_s = f"{r.compile_seconds:.2f}" if r.verdict != "trtpipe failed" else ""
        out.append("| " + " | ".join(_cell(x) for x in (
            r.recipe, s.source if s else "", s.config if s else "", _verdict(r),
            "" if r.verdict == "built" else r.reason, engine, compile_s, _types(r), _trtpipe(r), _counts(r))) + " |")
    out += ["", f"`rtx: {good}/{len(results)} models built, types as planned`", ""]
    disagreements = [(r.recipe, d) for r in results if r.comparison for d in r.comparison.disagreements]
    if disagreements:
        out += ["## Nodes not as planned", ""] + [f"- {name}: {_cell(d)}" for name, d in disagreements] + [""]
    return "\n".join(out)
