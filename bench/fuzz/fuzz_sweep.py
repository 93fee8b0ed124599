"""The `sweep` fuzz kind (issue 22 items 4, 12, 14, 15): real Hydra multiruns (`trtpipe -m`,
basic or joblib launcher) whose jobs succeed, fail validation (exit 1), fail with a user
error (exit 2), are killed (SIGKILL to the joblib worker running them), or are interrupted
(SIGINT to the whole process group, as Ctrl-C does).

Jobs are the product `model.path=<files> x validate.tolerance.rel_l2=<bounds>`: a good model
or a missing/garbage file (user error), a loose bound (passes) or 1e-9 (validation fails).

Oracles (a violation is a defect):
- `summary.md` exists in the sweep folder and has a row for every job (its model file's name
  and its bound appear in one line);
- the sweep's exit code is the worst job's (max of 0/1/2), or, with a killed job, non-zero;
  with Ctrl-C, 130; never a traceback on stderr. A signal that comes after the sweep decided
  its outcome keeps its exit code (cli._further_signals_keep_the_outcome): a worker killed after its job had
  ended (its record written before the kill), or Ctrl-C after summary.md was written, may end
  with the jobs' code;
- Ctrl-C: no job starts (its `.hydra/config.yaml` written) more than 1 s after the signal;
- a relative TRTPIPE_CACHE with `hydra.job.chdir=true` is one cache, in the start folder:
  no job folder gets its own cache;
- the cache verifies afterwards, nothing outside the cache and the sweep folder changes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from itertools import product
from pathlib import Path

from bench.fuzz import fuzz_models as fm
from bench.fuzz import fuzz_runs as fr

STAGES = "stages=[sanitize,precision,validate]"  # precision: a tight bound fails the FP16 candidate
LOOSE, TIGHT = "0.5", "1e-09"


def _models(workdir: Path, rng: random.Random, bad: bool) -> tuple[list[Path], dict[Path, int]]:
    """One or two good models, plus (when `bad`) a missing or a garbage one; expected codes by path."""
    folder = workdir / "models"
    good = [fm.build(folder / f"good{i}", random.Random(rng.randrange(2**31)), name=f"good{i}.onnx").path
            for i in range(rng.randint(1, 2))]  # file names unique per job: the summary's rows are found by them
    codes = {p: 0 for p in good}
    if bad:
        broken = folder / rng.choice(["missing.onnx", "garbage.onnx"])
        if broken.name == "garbage.onnx":
            broken.write_bytes(rng.randbytes(rng.randint(0, 64)))
        codes[broken] = 2
    return list(codes), codes


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        found += [int(c) for c in children]
        todo += [int(c) for c in children]
    return found


def _running_job(pid: int, sweep: Path) -> Path | None:
    """The job folder whose trtpipe.log process `pid` holds open, if any."""
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith(str(sweep)) and target.endswith("trtpipe.log"):
                return Path(target).parent
    except OSError:
        return None
    return None


def _jobs(sweep: Path) -> list[Path]:
    return sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit()) if sweep.is_dir() else []


def _written_before(path: Path, moment: float) -> bool:
    try:
        return path.stat().st_mtime < moment
    except OSError:
        return False


def _job_ended_before(sweep: Path, job: Path, moment: float) -> bool:
    """The job's record (runner/sweep_jobs.py) said it had ended before `moment`: its process was
    killed after it, and the job's outcome stands."""
    record = sweep / ".trtpipe-jobs" / f"{job.name}.json"
    try:
        return json.loads(record.read_text()).get("status") != "running" and _written_before(record, moment)
    except (OSError, ValueError):
        return False


def check_sweep(case: dict, workdir: Path) -> list[str]:
    rng = random.Random(f"sweep:{case['seed']}")
    mutation = case["mutation"]
    launcher = "basic" if mutation == "sweep_basic_user_error" else "joblib"
    bad = mutation in ("sweep_user_error", "sweep_basic_user_error") or rng.random() < 0.3
    paths, codes = _models(workdir, rng, bad)
    bounds = [LOOSE, TIGHT] if mutation == "sweep_failed" or rng.random() < 0.3 else [LOOSE]
    if mutation == "sweep_sigint":  # jobs still queued when the signal comes
        bounds = [LOOSE, "0.45", "0.4"]
    sweep, cache = workdir / "sweep", workdir / "cache"
    overrides = ["-m", f"model.path={','.join(str(p) for p in paths)}", f"validate.tolerance.rel_l2={','.join(bounds)}",
                 STAGES, f"hydra.sweep.dir={sweep}"]
    if launcher == "joblib":
        overrides += ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={rng.choice([1, 2])}"]
    env_cache: str | Path = cache
    if mutation == "sweep_relative_cache":
        overrides.append("hydra.job.chdir=true")
        env_cache = "cache"
    state: dict = {}
    delay = rng.uniform(0.0, 1.5)
    to_group = rng.random() < 0.5  # Ctrl-C in a terminal signals the group; `kill -INT` only the sweep

    def kill_a_worker(process) -> None:
        if state.get("done"):
            return
        for pid in _descendants(process.pid):
            job = _running_job(pid, sweep)
            if job is not None:
                state.setdefault("seen", time.perf_counter())
                if time.perf_counter() - state["seen"] >= delay:
                    state["before"] = time.time()
                    os.kill(pid, signal.SIGKILL)
                    state.update(done=True, killed=job)
                return

    def interrupt(process) -> None:
        if not state.get("done") and _jobs(sweep) and (_jobs(sweep)[0] / "trtpipe.log").exists():
            state.setdefault("seen", time.perf_counter())
            if time.perf_counter() - state["seen"] >= delay:
                state["before"] = time.time()
                (os.killpg if to_group else os.kill)(process.pid, signal.SIGINT)
                state.update(done=True, at=time.time())

    watch = {"sweep_killed": kill_a_worker, "sweep_sigint": interrupt}.get(mutation)
    before = fr.tree(workdir, (cache, sweep))
    outcome = fr.run_cli(workdir, overrides, env_cache, watch=watch, timeout=300)
    killed = bool(state.get("killed") or state.get("at"))
    problems = [fr.nothing_outside(before, fr.tree(workdir, (cache, sweep))), fr.cache_ok(cache, killed)]
    if outcome.code is None:
        return [f"hang: the sweep did not end within {outcome.seconds:.0f} s"]
    if "Traceback" in outcome.stderr:
        problems.append(f"exit {outcome.code} with a traceback: {outcome.lines()[-1][:200]}")
    jobs = list(product(paths, bounds))
    worst = max(max(codes[p], 1 if b == TIGHT and codes[p] == 0 else 0) for p, b in jobs)
    if mutation == "sweep_sigint" and state.get("done"):
        decided = _written_before(sweep / "summary.md", state["before"])  # the outcome was decided
        if outcome.code != 130 and not (decided and outcome.code == worst):
            problems.append(f"Ctrl-C on the sweep ended {outcome.code}, not 130")
        late = [j.name for j in _jobs(sweep) if (j / ".hydra" / "config.yaml").exists()
                and (j / ".hydra" / "config.yaml").stat().st_mtime > state["at"] + 1.0]
        if late:
            problems.append(f"job(s) {late} started after Ctrl-C")
        return [p for p in problems if p]
    if state.get("killed") and not _job_ended_before(sweep, state["killed"], state["before"]):
        if outcome.code == 0:
            problems.append(f"a killed job ({state['killed'].name}) and the sweep exits 0")
    elif state.get("killed"):  # a worker killed between jobs: the launcher may stop the others (137)
        if outcome.code not in (worst, 128 + signal.SIGKILL):
            problems.append(f"the sweep exits {outcome.code}, the worst job's code is {worst} (a worker was "
                            "killed after its job)")
    elif outcome.code != worst:
        problems.append(f"the sweep exits {outcome.code}, the worst job's code is {worst}")
    summary = sweep / "summary.md"
    if not summary.is_file():
        problems.append(f"no summary.md (exit {outcome.code}: {' | '.join(outcome.lines()[-2:])[:200]})")
    else:
        lines = summary.read_text().splitlines()
        missing = [f"{p.name} {b}" for p, b in jobs
                   if not any(p.name in line and (len(bounds) == 1 or b in line or str(float(b)) in line)
                              for line in lines)]
        if missing:
            problems.append(f"summary.md lists {len(jobs) - len(missing)} of {len(jobs)} jobs; missing {missing}")
    if mutation == "sweep_relative_cache":
        own = [j.name for j in _jobs(sweep) if (j / "cache").exists()]
        if own:
            problems.append(f"a relative TRTPIPE_CACHE made job folder(s) {own} their own cache")
    return [p for p in problems if p]
