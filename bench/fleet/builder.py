"""One simulated builder: a process running the fleet's shared sweep with its own HOME and its own
empty local cache (what a CI runner or a fresh build host has), and what its jobs' manifests say.

Decisions:
- Every builder runs the whole sweep (8 jobs: the README's main command over 4 `max_abs` x 2
  `cosine_min`), each in its own order (the lists rotated by the builder's index), all started at
  once. That is the case the remote cache is for: hosts that do not coordinate, each needing results
  another may already have made (CI runners checking one matrix, developers running the team's
  sweep). A share of the sweep per builder (each job run once, as a distributed launcher does) was
  not taken: its jobs share only their first stages, so it measures the same download path on
  fewer stages; the orders differ so that builders meet the race on the first stages (all need
  sanitize first) and then mostly different keys.
- One `trtpipe -m` process per builder (Hydra's basic launcher, jobs one after another), as a host
  runs a sweep; its wall and CPU time come from the kernel (`os.wait4`), children included.
- A stage is a remote hit where its manifest says `origin: remote`, a local hit where it is
  `cached` (or a `deferred` build with no re-run reason: the manifest keeps `deferred` for a cached
  deferred build too, and gives a reason only to a stage that ran), else a miss (it ran here).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

MAIN = "+recipe=transformer_fp16"  # the README's main command (the built-in transformer)
SWEEP = (("precision.auto.max_abs", ("1024", "2048", "4096", "8192")),
         ("validate.tolerance.cosine_min", ("0.999", "0.9999")))
JOBS = 8
_SENT = re.compile(r"\((\d+) bytes sent, ")


def sweep_overrides(index: int, count: int) -> list[str]:
    """The shared sweep in builder `index`'s order (of `count`): each list rotated by its share."""
    overrides = []
    for name, values in SWEEP:
        shift = index * len(values) // count
        overrides.append(f"{name}={','.join(values[shift:] + values[:shift])}")
    return overrides


@dataclass
class Builder:
    index: int
    folder: Path
    process: subprocess.Popen
    started: float
    wall_s: float = 0.0
    cpu_s: float = 0.0
    exit_code: int | None = None
    jobs: list[dict] = field(default_factory=list)  # manifest.json of each job


def start_builder(folder: Path, index: int, count: int, remote: str | None, aws_env: dict[str, str]) -> Builder:
    folder.mkdir(parents=True)
    (folder / "home").mkdir()
    env = {**os.environ, **aws_env, "HOME": str(folder / "home"), "TRTPIPE_CACHE": str(folder / "cache"),
           "XDG_CACHE_HOME": str(folder / "home" / ".cache")}
    command = [sys.executable, "-m", "trtpipe", "-m", MAIN, *sweep_overrides(index, count),
               f"hydra.sweep.dir={folder / 'sweep'}", *([f"cache.remote={remote}"] if remote else [])]
    with open(folder / "stdout.txt", "wb") as out, open(folder / "stderr.txt", "wb") as err:
        process = subprocess.Popen(command, cwd=folder, env=env, stdout=out, stderr=err)
    return Builder(index, folder, process, time.monotonic())


def wait_all(builders: list[Builder]) -> None:
    """Reap each builder as it ends (whichever first): its wall time, CPU time and manifests."""
    by_pid = {b.process.pid: b for b in builders}
    while by_pid:
        pid, status, usage = os.wait4(-1, 0)
        builder = by_pid.pop(pid, None)
        if builder is None:
            continue
        builder.wall_s = time.monotonic() - builder.started
        builder.cpu_s = usage.ru_utime + usage.ru_stime
        builder.exit_code = builder.process.returncode = os.waitstatus_to_exitcode(status)
        manifests = sorted((builder.folder / "sweep").glob("*/manifest.json"), key=lambda p: int(p.parent.name))
        builder.jobs = [json.loads(p.read_text()) | {"_log": (p.parent / "trtpipe.log").read_text()}
                        for p in manifests]


def where_from(stage: dict) -> str:
    """'remote', 'local' (a hit) or 'miss' (ran here)."""
    if stage.get("origin") == "remote":
        return "remote"
    if stage["status"] == "cached" or (stage["status"] == "deferred" and stage.get("reason") is None):
        return "local"
    return "miss"


def bytes_moved(job: dict) -> tuple[int, int]:
    """(uploaded, downloaded) bytes of one job: the tier's upload lines in its log, the manifest's downloads."""
    down = sum((s.get("remote") or {}).get("downloaded", 0) for s in job["stages"])
    return sum(int(m) for m in _SENT.findall(job["_log"])), down


def outputs_of(job: dict) -> tuple[tuple, dict]:
    """(the job's sweep overrides, stage -> kind -> sha256): what must agree across builders."""
    key = tuple(sorted(o for o in job["overrides"] if o.split("=")[0] in dict(SWEEP)))
    return key, {s["name"]: {k: v["sha256"] for k, v in s["outputs"].items()} for s in job["stages"]}
