"""`python -m bench.rtx` (alias `python -m bench.rtx_check`): trtpipe's precision output
through the real TensorRT-RTX parser and builder, ahead of time for an RTX architecture,
without a GPU.

    python -m bench.rtx [--target sm89] [--recipes NAME ...] [--wild | --no-wild]
                        [--models NAME ...] [--keep DIR] [--markdown PATH]

Models (bench/rtx/subjects.py): every shipped recipe on its built-in model, and each model
of the wild corpus (bench/wild/WILD.md) with its fitting recipe. `--recipes` picks
recipes (and then leaves the wild corpus out unless `--wild`); `--models` picks wild
models (and then leaves the built-in ones out unless `--recipes`); `--no-wild` leaves the
wild corpus out. Per model: trtpipe's CLI runs sanitize -> upgrade_opset -> precision ->
build (whose op check runs before it defers); a child process (bench/rtx/compile_one.py,
in bench/rtx/sandbox.py's fake-GPU namespace with bench/rtx/standins.py's stand-in CUDA
libraries) compiles precision/model.onnx with the EP; the parent reads the parser's
per-node types from the captured log (trtpipe/trt/rtx/parser_log.py) and compares them with
precision_plan.json (trtpipe/trt/rtx/plan_compare.py). Prints per model: parsed / built /
refused (the parser's reason), engine generation and compile seconds, "N/N node types as
planned (B in If/Loop/Scan bodies)" (every plan node, bodies included; a plan node the model or the
parser's log lacks is a disagreement, and a log with no per-node line compares nothing and never
counts); last line `rtx: P/N models built, types as planned`. A model counts in P when it
built with every node as planned, or when the real parser (or, the model parsed, the builder)
refused it and trtpipe's own op check had refused it first naming the same op (issue 23; a
builder's line names no op: it is attributed by trtpipe/trt/parser/builder_limits.py, when
the line carries a measured limit's signature and the model holds a node under that limit). Exit 0 when every model counts,
1 otherwise, 2 when the oracle cannot run (no wheel, no namespaces: bench/rtx/sandbox.py, no gcc).
The full run (no selection) writes its table to bench/rtx/RTX.md (`--markdown`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from bench.rtx import sandbox, standins, subjects, wheel
from trtpipe.config.build_schema import RTX_TARGET_SMS as TARGETS  # what the EP's nv_target_sm accepts
from trtpipe.trt.parser import builder_limits
from trtpipe.trt.rtx import parser_log, plan_compare

REPO = Path(__file__).resolve().parents[2]
MARKDOWN = REPO / "bench" / "rtx" / "RTX.md"
REASON_LIMIT = 1000   # the refusal's line in RTX.md; the console shows its first 300 characters


@dataclass
class ModelResult:
    recipe: str                  # the row's label (recipe name, or wild model name)
    verdict: str = ""            # built | refused by the parser/builder/EP | trtpipe failed
    reason: str = ""
    engine_seconds: float | None = None
    compile_seconds: float = 0.0
    comparison: plan_compare.Comparison | None = None
    cpu_only: bool = False
    outside_ep: list[str] = field(default_factory=list)   # compiled model's nodes that are not EPContext
    log_path: str = ""
    notes: list[str] = field(default_factory=list)
    subject: subjects.Subject | None = None
    trtpipe: subjects.TrtpipeRun | None = None
    refused_op: str = ""         # the op the real parser/EP named when it refused

    @property
    def as_planned(self) -> bool:
        c = self.comparison
        # Every plan node, If/Loop/Scan bodies included, in the model and typed as planned; a log
        # without per-node lines compares nothing, so it never counts (issue 32, items 15 and 16).
        return (self.verdict == "built" and c is not None and not c.no_node_lines and c.planned > 0
                and c.as_planned == c.planned and not c.not_in_model
                and c.inserted_as_written == c.inserted and not self.outside_ep)

    @property
    def refused(self) -> bool:
        return "refused" in self.verdict     # by the parser, the EP, or (parsed) the builder

    @property
    def refusal_predicted(self) -> bool:
        """Refused by the real parser or builder, and trtpipe's op check refused the same op first."""
        return (self.refused and bool(self.refused_op) and self.trtpipe is not None
                and self.refused_op in self.trtpipe.refused_ops)

    @property
    def counts(self) -> bool:
        return self.as_planned or self.refusal_predicted

    def line(self) -> str:
        if self.verdict != "built":
            told = ""
            if self.trtpipe is not None and self.refused:
                told = ("  [trtpipe's op check refused it first: " + ", ".join(self.trtpipe.refused_ops) + "]"
                        if self.trtpipe.refused_ops else "  [NOT predicted: trtpipe's op check passed it]")
            return f"{self.recipe:26s} {self.verdict}: {self.reason[:300]}{told}"
        c = self.comparison
        engine = f"{self.engine_seconds:.2f}s" if self.engine_seconds is not None else "?"
        if c is None or c.no_node_lines:
            return (f"{self.recipe:26s} parsed, built  engine {engine}  compile {self.compile_seconds:.2f}s  "
                    "NOT compared: the parser's log holds no per-node line")
        return (f"{self.recipe:26s} parsed, built  engine {engine}  compile {self.compile_seconds:.2f}s  "
                f"{c.as_planned}/{c.planned} node types as planned ({c.in_bodies} in If/Loop/Scan bodies), "
                f"{c.inserted_as_written}/{c.inserted} inserted Casts as written"
                + ("" if self.cpu_only else "  (no 'CPU-only mode' line)")
                + (f"  NOT on the EP: {', '.join(self.outside_ep)}" if self.outside_ep else ""))


def shipped_recipes() -> list[str]:
    return subjects.shipped_recipes()


def _child_env(wheel_home: Path, standin_dir: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    # The stand-ins are also preloaded by path; LD_LIBRARY_PATH covers a library that
    # dlopen()s them by soname later.
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(standin_dir), str(wheel.package_dir(wheel_home)), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def compile_and_compare(recipe: str, run: Path, oracle: dict, target: str, timeout: float) -> ModelResult:
    result = ModelResult(recipe)
    model, plan = run / "precision" / "model.onnx", run / "precision" / "precision_plan.json"
    out, log_path = run / "rtx" / f"model_ctx_{target}.onnx", run / "rtx" / f"build_{target}.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    child = [sys.executable, "-m", "bench.rtx.compile_one", str(model), str(out), "--target", target,
             "--standins", str(oracle["standins"]), "--wheel-home", str(oracle["wheel_home"])]
    shapes = profile_shapes(run)
    if shapes:
        child += ["--shapes", *shapes]
    start = time.perf_counter()
    try:
        done = subprocess.run(sandbox.wrap(child, oracle["fake_drm"]), capture_output=True, text=True,
                              env=oracle["env"], timeout=timeout)
        stdout, stderr, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        # TimeoutExpired carries bytes even under text=True.
        partial = exc.stderr or b""
        stdout, stderr, code = "", partial.decode(errors="replace") if isinstance(partial, bytes) else partial, None
    log_path.write_text(stderr)
    result.log_path = str(log_path)
    log = parser_log.read(stderr)
    result.engine_seconds, result.cpu_only = log.engine_seconds, log.cpu_only
    status = json_tail(stdout)
    result.compile_seconds = status.get("seconds", time.perf_counter() - start)
    if code is None:
        result.verdict, result.reason = "timed out", f"no answer after {timeout:g} s (--timeout)"
    elif not status:
        result.verdict = "refused"
        result.reason = f"child exit {code}: " + parser_log.reason(log, stderr.strip()[-300:], limit=REASON_LIMIT)
        result.refused_op = parser_log.refused_op(log)
    elif not status["ok"] and parser_log.BUILDER_FAILED in status["error"]:
        # Parsed and claimed whole, the engine not built: the builder's line is the reason, not a
        # parser error of the EP's earlier parse of an If/Loop body alone (trtpipe/trt/rtx/parser_log.py).
        result.verdict = "parsed, refused by the builder"
        result.reason = parser_log.builder_reason(log, status["error"], limit=REASON_LIMIT)
        result.refused_op = builder_limits.attribute(result.reason, onnx.load(str(model), load_external_data=False))
    elif not status["ok"]:
        result.verdict, result.reason = _refused_by(log), parser_log.reason(log, status["error"], limit=REASON_LIMIT)
        result.refused_op = parser_log.refused_op(log)
    else:
        result.verdict = "built"
        # The whole graph on the EP: the compiled model holds only EPContext nodes.
        compiled = onnx.load(str(out), load_external_data=False)
        result.outside_ep = [n.op_type for n in compiled.graph.node if n.op_type != "EPContext"]
    if log.nodes or result.verdict == "built":   # a built model with no node lines: compared, and says so
        result.comparison = plan_compare.compare(plan, model, log)
    return result


def profile_shapes(run: Path) -> list[str] | None:
    """trtpipe's first optimisation profile for this build, as the build stage wrote it for
    trtexec (build/trtexec.txt: `--minShapes=x:1x3x48x32 ...`), which is also the EP's
    format; None when the build has none (static shapes) or the stage wrote no such file."""
    text = run / "build" / "trtexec.txt"
    if not text.is_file():
        return None
    found = {}
    for line in text.read_text().splitlines():
        for key in ("min", "opt", "max"):
            flag = f"--{key}Shapes="
            if line.strip().startswith(flag) and key not in found:
                found[key] = line.strip()[len(flag):].rstrip(" \\")
    return [found["min"], found["opt"], found["max"]] if len(found) == 3 else None


def _refused_by(log: parser_log.ParserLog) -> str:
    """Who refused: the parser (its op checks), the builder (parsed, engine not built), or
    the EP before parsing (e.g. a DOUBLE graph output, which no node line precedes)."""
    if log.parser_error:
        return "refused by the parser"
    return "parsed, refused by the builder" if log.nodes else "refused by the EP"


def json_tail(stdout: str) -> dict:
    """The last line of `stdout` that is a JSON object (trtpipe --json's status line), or {}."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def prepare(tmp: Path, wheel_home: Path | None = None) -> dict:
    """Installs the pinned wheel if missing, compiles the stand-ins, writes the fake device."""
    home = wheel.ensure(wheel_home)
    standin_dir = tmp / "standins"
    standins.build(wheel.package_dir(home), standin_dir)
    return {"wheel_home": home, "standins": standin_dir, "fake_drm": sandbox.write_fake_drm(tmp / "sys"),
            "env": _child_env(home, standin_dir)}


def run(chosen: list[subjects.Subject], target: str, root: Path, timeout: float, echo=print) -> list[ModelResult]:
    oracle = prepare(root / "oracle")
    results = []
    for subject in chosen:
        work = root / subject.name
        work.mkdir(parents=True, exist_ok=True)
        try:
            trt = subjects.run_trtpipe(subject, work)
        except RuntimeError as exc:
            result = ModelResult(subject.name, verdict="trtpipe failed", reason=str(exc))
        else:
            result = compile_and_compare(subject.name, trt.run_dir, oracle, target, timeout)
            result.trtpipe = trt
        result.subject = subject
        echo(result.line())
        if result.comparison:
            for d in result.comparison.disagreements[:8]:
                echo(f"    {d}")
        results.append(result)
    good = sum(r.counts for r in results)
    echo(f"rtx: {good}/{len(results)} models built, types as planned")
    return results


def choose(args) -> list[subjects.Subject]:
    """The models to build, from --recipes / --models / --wild (see the module doc)."""
    wild = args.wild if args.wild is not None else (bool(args.models) or not args.recipes)
    recipes = args.recipes or ([] if args.models else shipped_recipes())
    return subjects.builtin_subjects(recipes) + (subjects.wild_subjects(args.models) if wild else [])


def main(argv=None) -> int:
    from bench.wild.wild_models import BY_NAME

    parser = argparse.ArgumentParser(prog="python -m bench.rtx", description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="sm89", choices=TARGETS, help="nv_target_sm (default sm89)")
    parser.add_argument("--recipes", nargs="+", metavar="NAME", help="built-in models: these recipes only")
    parser.add_argument("--wild", action=argparse.BooleanOptionalAction, default=None,
                        help="include the wild corpus (default: yes, unless --recipes picks recipes)")
    parser.add_argument("--models", nargs="+", metavar="NAME", choices=list(BY_NAME),
                        help="wild models: these only")
    parser.add_argument("--keep", type=Path, help="keep run directories, logs and EPContext models here")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per compile")
    parser.add_argument("--ops", nargs="*", metavar="OP",
                        help="instead: the per-op table (bench/rtx/ops.py): every op of the parser lists, "
                             "or these ops only (printed, nothing written)")
    parser.add_argument("--markdown", type=Path,
                        help=f"write the table here (default: {MARKDOWN.relative_to(REPO)} on a full run; '-': none)")
    args = parser.parse_args(argv)
    problem = sandbox.unavailable()
    if problem:
        print(f"rtx: cannot show the fake GPU: {problem}", file=sys.stderr)
        return 2
    if args.ops is not None:
        from bench.rtx import ops
        try:
            return ops.main(args.target, args.ops or None, args.keep)
        except (wheel.WheelUnavailable, RuntimeError) as exc:
            print(f"rtx: cannot run the oracle: {exc}", file=sys.stderr)
            return 2
    full = not (args.recipes or args.models or args.wild is False)
    markdown = args.markdown or (MARKDOWN if full else None)
    started = time.perf_counter()
    try:
        chosen = choose(args)
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            results = run(chosen, args.target, args.keep.resolve(), args.timeout)
        else:
            with tempfile.TemporaryDirectory(prefix="bench-rtx-") as tmp:
                results = run(chosen, args.target, Path(tmp), args.timeout)
    except (wheel.WheelUnavailable, RuntimeError) as exc:
        print(f"rtx: cannot run the oracle: {exc}", file=sys.stderr)
        return 2
    if markdown and str(markdown) != "-":
        from bench.rtx import report
        markdown.write_text(report.markdown(results, args.target, time.perf_counter() - started, REPO))
        print(f"report: {markdown}")
    return 0 if all(r.counts for r in results) else 1
