"""The remote cache through the real `trtpipe` command (issue 34, items 1 and 2): two machines
(two empty local caches) and one S3 server on loopback (s3_server.py). The README's main command
runs on the first; the second downloads every stage and gets the same bytes. Faults end in one
line and the first machine's outputs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cache_remote.s3_server import BUCKET, another_server, new_prefix
from tests.cli_helpers import cache_entries, run_command, run_trtpipe

MAIN = ("+recipe=transformer_fp16",)  # the README's main command
SMALL = ("model.builtin=mixed_precision", "stages=[sanitize,upgrade_opset]")
STAGES = ["sanitize", "upgrade_opset", "precision", "build", "validate"]


def outputs(run) -> dict[str, dict[str, str]]:
    """stage -> kind -> sha256, from the manifest."""
    return {s["name"]: {k: v["sha256"] for k, v in s["outputs"].items()} for s in run.manifest["stages"]}


def remote_lines(stderr: str) -> list[str]:
    """The remote tier's warnings (each starts with `cache.remote s3://...`)."""
    return [line for line in stderr.splitlines() if line.startswith("cache.remote ")]


def files_of(run_dir: Path) -> dict[str, bytes]:
    """Every file the run placed, but its log, manifest and summary.md (paths, times, origins) and Hydra's record."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name not in ("trtpipe.log", "manifest.json", "summary.md") and ".hydra" not in p.parts}


@pytest.fixture(scope="module")
def fleet(s3, tmp_path_factory):
    """Machine 1 runs the main command with an empty cache, machine 2 the same with another one."""
    work = tmp_path_factory.mktemp("fleet")
    url = f"s3://{BUCKET}/{new_prefix()}"
    first = run_trtpipe(work, *MAIN, f"cache.remote={url}", cache=work / "cache1", run_name="first", env=s3.env())
    second = run_trtpipe(work, *MAIN, f"cache.remote={url}", "--json", cache=work / "cache2", run_name="second",
                         env=s3.env())
    return {"work": work, "url": url, "first": first, "second": second}


def test_the_second_machine_downloads_every_stage_and_gets_the_same_bytes(fleet):
    first, second = fleet["first"], fleet["second"]
    assert (first.code, second.code) == (0, 0), first.stderr + second.stderr
    assert [s["name"] for s in second.manifest["stages"]] == STAGES
    assert all(s["origin"] == "local" and s["remote"] == {"upload": "uploaded"} for s in first.manifest["stages"])
    for stage in second.manifest["stages"]:
        assert stage["origin"] == "remote" and stage["status"] in ("cached", "deferred")  # a GPU-less build defers
        assert stage["remote"]["downloaded"] > 0
        [line] = [line for line in second.stderr.splitlines() if line.split()[:1] == [stage["name"]]]
        assert f"{stage['status']} (remote, " in line and " s, " in line and "B)" in line
    assert "running" not in second.stderr  # --json: the progress lines on stderr, one JSON line on stdout
    summary = __import__("json").loads(second.stdout.splitlines()[-1])
    assert [s["origin"] for s in summary["stages"]] == ["remote"] * len(STAGES)
    assert outputs(second) == outputs(first)
    assert files_of(second.run_dir) == files_of(first.run_dir)
    assert remote_lines(first.stderr + second.stderr) == []


def test_only_cache_entries_go_up(fleet, s3):
    prefix = fleet["url"].removeprefix(f"s3://{BUCKET}/") + "/"
    names = sorted(s3.objects(prefix))
    records = [n for n in names if n.startswith(prefix + "entries/")]
    assert sorted(n.split("/")[-2] for n in records) == sorted(STAGES)
    assert all(n.startswith((prefix + "entries/", prefix + "files/")) for n in names)
    digests = {d for s in fleet["first"].manifest["stages"] for d in (s["outputs"][k]["sha256"] for k in s["outputs"])}
    stored = {n.rsplit("/", 1)[-1] for n in names if n.startswith(prefix + "files/")}
    assert not {"manifest.json", "trtpipe.log"} & {n.rsplit("/", 1)[-1] for n in names}
    assert stored >= {d for d in digests if len(d) == 64} - {""}  # every artifact's bytes, by content


def test_verify_accepts_a_run_whose_artifacts_came_from_the_remote(fleet):
    done = run_command(fleet["work"], "verify", str(fleet["second"].run_dir), env={"AWS_ENDPOINT_URL": "http://0.0.0.0:9"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "identical" in done.stdout and "cache.remote" not in done.stderr  # the rebuild never asks the remote


def test_a_wrong_credential_is_one_line_and_the_run_completes_locally(fleet, s3, tmp_path):
    run = run_trtpipe(tmp_path, *MAIN, f"cache.remote={fleet['url']}", cache=tmp_path / "cache",
                      env=s3.env(AWS_SECRET_ACCESS_KEY="not-the-secret"))
    assert run.code == 0, run.stderr
    [line] = remote_lines(run.stderr)
    assert "is not usable (SignatureDoesNotMatch" in line and "local cache only" in line
    assert all(s["origin"] == "local" for s in run.manifest["stages"])
    assert outputs(run) == outputs(fleet["first"])


def test_a_server_stopped_mid_run_is_one_line_and_the_same_result(fleet, s3, tmp_path):
    """The first stage comes from the remote, then its server stops: the other stages run here."""
    going = another_server(s3)
    command = [sys.executable, "-m", "trtpipe", *MAIN, f"cache.remote={fleet['url']}",
               f"hydra.run.dir={tmp_path / 'run'}"]
    env = {**os.environ, "TRTPIPE_CACHE": str(tmp_path / "cache"), **s3.env(AWS_ENDPOINT_URL=going.endpoint)}
    with subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as process:
        seen = []
        for line in process.stdout:
            seen.append(line)
            if line.split()[:2] == ["sanitize", "cached"]:
                going.stop()
        stderr = process.stderr.read()
    assert process.returncode == 0, stderr
    [line] = remote_lines(stderr)
    assert "is not usable (Could not connect" in line and "looking up upgrade_opset" in line
    manifest = __import__("json").loads((tmp_path / "run" / "manifest.json").read_text())
    assert [s["origin"] for s in manifest["stages"]] == ["remote"] + ["local"] * 4
    assert {s["name"]: {k: v["sha256"] for k, v in s["outputs"].items()} for s in manifest["stages"]} \
        == outputs(fleet["first"])


def test_read_mode_never_writes_and_no_remote_never_asks(s3, tmp_path):
    url = f"s3://{BUCKET}/{new_prefix()}"
    prefix = url.removeprefix(f"s3://{BUCKET}/")
    read = run_trtpipe(tmp_path, *SMALL, f"cache.remote={url}", "cache.remote_mode=read", cache=tmp_path / "c1",
                       run_name="read", env=s3.env())
    assert read.code == 0 and [s["remote"] for s in read.manifest["stages"]] == [None, None]
    assert s3.objects(prefix) == {}
    off = run_trtpipe(tmp_path, *SMALL, f"cache.remote={url}", "--no-remote", cache=tmp_path / "c2", run_name="off",
                      env=s3.env(AWS_ENDPOINT_URL="http://127.0.0.1:9"))  # nothing listens there
    assert off.code == 0 and off.stderr == "" and "(remote" not in off.stdout
    assert off.manifest["config"]["cache"]["remote"] is None
    assert [s["origin"] for s in off.manifest["stages"]] == ["local", "local"]


def test_a_missing_boto3_is_exit_2_in_one_line_with_nothing_written(tmp_path):
    absent = tmp_path / "site"
    absent.mkdir()  # a Python that finds no boto3 (find_spec answers None, `import boto3` raises ImportError)
    (absent / "sitecustomize.py").write_text("import sys\nsys.modules['boto3'] = None\n")
    path = os.pathsep.join([str(absent), os.environ.get("PYTHONPATH", "")])
    run = run_trtpipe(tmp_path, *SMALL, "cache.remote=s3://some-bucket/ci", cache=tmp_path / "cache",
                      env={"PYTHONPATH": path})
    assert run.code == 2
    assert run.stderr.strip().count("\n") == 0 and "pip install 'boto3>=" in run.stderr
    assert cache_entries(tmp_path / "cache") == [] and not run.run_dir.exists()


def test_two_machines_racing_on_every_key_leave_one_complete_entry_each(s3, tmp_path):
    """Two runs start at once with empty caches and one empty remote: whichever order the stages
    meet in, each key's record is written once (`If-None-Match: *`): one run's stage says
    `uploaded`, the other's `present` (it built too) or it was a remote hit; a third machine then
    gets every stage from the remote, the same bytes."""
    url = f"s3://{BUCKET}/{new_prefix()}"
    env = {**os.environ, **s3.env()}
    runs = []
    for name in ("one", "two"):
        command = [sys.executable, "-m", "trtpipe", *SMALL, f"cache.remote={url}", f"hydra.run.dir={tmp_path / name}"]
        runs.append(subprocess.Popen(command, cwd=tmp_path, env={**env, "TRTPIPE_CACHE": str(tmp_path / f"c-{name}")},
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for process in runs:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
    manifests = [__import__("json").loads((tmp_path / name / "manifest.json").read_text()) for name in ("one", "two")]
    for index, stage in enumerate(["sanitize", "upgrade_opset"]):
        seen = [m["stages"][index] for m in manifests]
        assert [s["remote"].get("upload") for s in seen].count("uploaded") == 1, seen
        assert all(s["remote"].get("upload") in ("uploaded", "present") or s["origin"] == "remote" for s in seen)
    third = run_trtpipe(tmp_path, *SMALL, f"cache.remote={url}", cache=tmp_path / "c-three", run_name="three",
                        env=s3.env())
    assert [s["origin"] for s in third.manifest["stages"]] == ["remote", "remote"]
    assert outputs(third) == {s["name"]: {k: v["sha256"] for k, v in s["outputs"].items()}
                              for s in manifests[0]["stages"]}
