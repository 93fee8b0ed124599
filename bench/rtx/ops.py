"""`python -m bench.rtx --ops`: what the real TensorRT-RTX 1.7.1 ONNX parser and builder
accept, op by op and element type by element type, measured on single-op models.

For every op of trtpipe's documented parser lists (trtpipe/trt/parser/onnx_parser_ops/*.json)
and each element type (FP32, FP16, BF16, and the integer types the TensorRT 11.1 list gives
the op), a single-op model (bench/rtx/op_models.py) is compiled ahead of time for the target
(sm89) by the EP in the oracle's sandbox (bench/rtx/compile_many.py). Verdict per (op, type):
`built` (parsed, engine built, the whole graph on the EP), `parsed, refused by the builder`,
`refused by the parser` / `refused by the EP` (with the logged reason), `not built` (no valid
ONNX model of that type: the schema does not admit it, or no model for the op).

Writes trtpipe/trt/parser/onnx_parser_ops_measured/tensorrt_rtx-1.7.1.json (the data
trtpipe's plan check reads, trtpipe/trt/parser/measured.py) and docs/rtx-parser.md (where the
measurement differs from the documented TensorRT 11.1 list).
"""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import onnx

from bench.rtx import op_models, sandbox
from trtpipe.trt.rtx import parser_log

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "trtpipe" / "trt" / "parser" / "onnx_parser_ops_measured" / "tensorrt_rtx-1.7.1.json"
DOC = REPO / "docs" / "rtx-parser.md"
DOCUMENTED = REPO / "trtpipe" / "trt" / "parser" / "onnx_parser_ops"
BATCH = 60          # jobs per child process (a crash loses at most the rest of one batch)


def documented(version: str) -> dict:
    return json.loads((DOCUMENTED / f"{version}.json").read_text())["ops"]


def all_ops() -> list[str]:
    names = set()
    for path in DOCUMENTED.glob("*.json"):
        names |= set(json.loads(path.read_text())["ops"])
    return sorted(names)


def make_jobs(ops: list[str], work: Path) -> tuple[list[dict], dict]:
    """Writes the models; returns the compile jobs and the table rows filled so far."""
    doc = documented("11.1")
    table: dict[str, dict] = {}
    jobs = []
    for op in ops:
        row = table.setdefault(op, {"types": {}})
        for type_name in op_models.types_to_try(op, doc.get(op, {})):
            try:
                built = op_models.build(op, type_name)
            except op_models.NotBuilt as exc:
                row["types"][type_name] = {"verdict": "not built", "reason": str(exc)}
                continue
            except Exception as exc:  # noqa: BLE001 - a generator failure is recorded, not fatal
                row["types"][type_name] = {"verdict": "not built", "reason": f"generator: {type(exc).__name__}: {exc}"}
                continue
            row.setdefault("model", {"case": built.case, "opset": built.opset})
            path = work / f"{op}_{type_name}.onnx"
            onnx.save(built.model, path)
            jobs.append({"model": str(path), "out": str(work / f"{op}_{type_name}_ctx.onnx"),
                         "log": str(work / f"{op}_{type_name}.log"), "op": op, "type": type_name,
                         "shapes": static_profile(built.model)})
    return jobs, table


def static_profile(model: onnx.ModelProto) -> list[str] | None:
    """min = opt = max = each graph input's static shape, in the EP's format: without a profile
    the EP assumes a fully dynamic one, and a single-op model's build should not hinge on that."""
    items = []
    for vi in model.graph.input:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if dims and all(d > 0 for d in dims):
            items.append(f"{vi.name}:{'x'.join(map(str, dims))}")
    return [",".join(items)] * 3 if items else None


def run_jobs(jobs: list[dict], oracle: dict, target: str, work: Path, echo=print) -> list[dict]:
    """Compiles every job in batches; a batch whose child dies is resumed after the job it died on."""
    results: list[dict | None] = [None] * len(jobs)
    start = 0
    while start < len(jobs):
        batch = jobs[start:start + BATCH]
        spec = work / f"jobs_{start}.json"
        spec.write_text(json.dumps(batch))
        child = [sys.executable, "-m", "bench.rtx.compile_many", str(spec), "--target", target,
                 "--standins", str(oracle["standins"]), "--wheel-home", str(oracle["wheel_home"])]
        try:
            done = subprocess.run(sandbox.wrap(child, oracle["fake_drm"]), capture_output=True, text=True,
                                  env=oracle["env"], timeout=60 + 30 * len(batch))
            stdout, code = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            stdout, code = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) \
                else (exc.stdout or ""), None
        finished = 0
        for line in stdout.splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and "index" in value:
                results[start + value["index"]] = value
                finished = value["index"] + 1
        if finished < len(batch):   # the child died (signal, abort) or timed out on this job
            results[start + finished] = {"ok": False, "seconds": 0.0, "crashed": True,
                                         "error": "the compile killed the process" if code is not None
                                         else "no answer (timeout)", "exit": code}
            finished += 1
        echo(f"  compiled {start + finished}/{len(jobs)}")
        start += finished
    return results


def verdicts(jobs: list[dict], results: list[dict], table: dict) -> None:
    for job, result in zip(jobs, results):
        log_text = Path(job["log"]).read_text(errors="replace") if Path(job["log"]).is_file() else ""
        log = parser_log.read(log_text)
        entry: dict = {}
        if result.get("ok") and log.parser_error and parser_log.refused_op(log) == job["op"]:
            # The parser refused the op, and ONNX Runtime then inlined the op's ONNX function
            # (Range, Celu, ...) and handed the EP that expansion, which built: not the op's verdict.
            entry["verdict"] = "refused by the parser"
            entry["reason"] = ("the EP then built ONNX Runtime's expansion of the op's function; the parser: "
                               + parser_log.reason(log, "", limit=200))
        elif result.get("ok") and not result.get("outside_ep"):
            entry["verdict"] = "built"
        elif result.get("ok"):
            entry["verdict"] = "not on the EP"
            entry["reason"] = f"the compiled model keeps {', '.join(result['outside_ep'])} outside the EP"
        elif result.get("crashed"):
            # No verdict on the op: the process died, here in the stand-in environment (e.g.
            # after "Shape tensor detected", reading a shape tensor's values needs a device).
            entry["verdict"] = "crashed"
            last = [parser_log.clean(ln) for ln in log_text.splitlines() if ln.strip()][-1:]
            after = last[0].split("] ")[-1].strip()[:160] if last else ""
            entry["reason"] = (f"{result['error']} (exit {result.get('exit')})" + (f" after: {after}" if after else ""))
        else:
            entry["verdict"] = ("refused by the parser" if log.parser_error else
                                "parsed, refused by the builder" if log.nodes else "refused by the EP")
            entry["reason"] = parser_log.reason(log, result.get("error", ""), limit=240)
        node = next((n for n in log.nodes.values() if n.op == job["op"]), None)
        if node is not None:
            entry["parsed_types"] = {"inputs": [t for _, t in node.inputs], "outputs": [t for _, t in node.outputs]}
        table[job["op"]]["types"][job["type"]] = entry


def write(table: dict, target: str, seconds: float, ops_count: int) -> dict:
    from bench.rtx import wheel
    from bench.wild.wild_report import environment

    env = environment(REPO)
    doc = {
        "format": 1,
        "product": "TensorRT-RTX",
        "version": "1.7.1",
        "measured_with": f"{wheel.NAME} {wheel.VERSION} (bundles TensorRT-RTX 1.7.1), onnxruntime "
                         f"{env['onnxruntime']}, onnx {env['onnx']}, ahead of time for {target}, no GPU",
        "generated_by": "python -m bench.rtx --ops",
        "how": "one single-op model per (op, element type), from ONNX's backend node tests (bench/rtx/op_models.py, "
               "bench/rtx/op_extra.py), compiled by the TensorRT-RTX EP with nv_detailed_build_log; verdict from "
               "the compile and the parser's log (bench/rtx/ops.py)",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "commit": env["head"],
        "seconds": round(seconds),
        "ops": {op: table[op] for op in sorted(table)},
    }
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return doc


def main(target: str, only: list[str] | None, keep: Path | None, echo=print) -> int:
    import tempfile

    from bench.rtx import check, ops_doc

    started = time.perf_counter()
    ops = only or all_ops()
    with tempfile.TemporaryDirectory(prefix="bench-rtx-ops-") as tmp:
        work = keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        oracle = check.prepare(work / "oracle")
        jobs, table = make_jobs(ops, work)
        echo(f"rtx --ops: {len(jobs)} single-op models for {len(ops)} ops, "
             f"{sum(len(r['types']) for r in table.values())} (op, type) pairs without a model")
        results = run_jobs(jobs, oracle, target, work, echo)
        verdicts(jobs, results, table)
    seconds = time.perf_counter() - started
    if only:
        for op in ops:
            echo(f"{op}: " + ", ".join(f"{t} {v['verdict']}" + (f" ({v['reason'][:120]})" if v.get("reason") else "")
                                       for t, v in table[op]["types"].items()))
        return 0
    doc = write(table, target, seconds, len(ops))
    DOC.write_text(ops_doc.page(doc, documented("11.1"), documented("10.16")))
    built = sum(v["verdict"] == "built" for r in table.values() for v in r["types"].values())
    record_figures(doc)
    echo(f"rtx --ops: {built}/{len(jobs)} (op, type) models built, {len(ops)} ops, {seconds:.0f} s; "
         f"wrote {DATA.relative_to(REPO)} and {DOC.relative_to(REPO)}")
    return 0


def record_figures(doc: dict, converted_from: str | None = None) -> None:
    """The run's figures docs/rtx-parser.md cites, in bench/rtx/results.json (docs/figures.md)."""
    from bench.common.results import write_results

    verdicts = [v["verdict"] for r in doc["ops"].values() for v in r["types"].values()]
    figures = {"ops.seconds": doc["seconds"], "ops.ops": len(doc["ops"]), "ops.built": verdicts.count("built")}
    write_results("rtx", figures, command="python -m bench.rtx --ops", converted_from=converted_from,
                  owns=lambda key: key.startswith("ops."))
