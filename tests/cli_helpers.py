"""Run the real `trtpipe` command in a subprocess, from a scratch working directory (forked warm from\na process that has imported trtpipe: tests/cli_zygote.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.cli_zygote import warm_trtpipe


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    run_dir: Path

    @property
    def manifest(self) -> dict:
        return json.loads((self.run_dir / "manifest.json").read_text())

    def statuses(self) -> dict[str, str]:
        return {stage["name"]: stage["status"] for stage in self.manifest["stages"]}


def run_trtpipe(workdir: Path, *overrides: str, cache: Path | None = None, run_name: str = "run",
                env: dict | None = None, timeout: float = 300, preexec_fn=None) -> Run:
    """`python -m trtpipe` with cwd=workdir, so the installed package (not the checkout) runs."""
    run_dir = workdir / "runs" / run_name
    environment = {**os.environ, "TRTPIPE_CACHE": str(cache or workdir / "cache"), **(env or {})}
    environment.pop("TRTPIPE_DEBUG", None)
    command = [sys.executable, "-m", "trtpipe", *overrides]
    if not any(o.startswith(("-m", "--multirun", "--cfg", "--info", "-c", "-i", "--shell")) for o in overrides):
        command.append(f"hydra.run.dir={run_dir}")
    done = warm_trtpipe(command[3:], workdir, environment, timeout, preexec_fn)
    return Run(done.returncode, done.stdout, done.stderr, run_dir)


def cache_entries(cache: Path) -> list[Path]:
    entries = cache / "entries"
    return sorted(p for p in entries.glob("*/*") if p.is_dir()) if entries.exists() else []


def run_command(workdir: Path, *args: str, cache: Path | None = None, env: dict | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m trtpipe ARGS` as typed, nothing appended (no hydra.run.dir): for the
    subcommands (`trtpipe verify`, `trtpipe cache`), which are not Hydra overrides."""
    environment = {**os.environ, "TRTPIPE_CACHE": str(cache or workdir / "cache"), **(env or {})}
    environment.pop("TRTPIPE_DEBUG", None)
    return warm_trtpipe(list(args), workdir, environment, timeout)
