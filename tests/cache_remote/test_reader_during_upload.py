"""A reader during an upload (issue 34, item 2): a second machine (its own process and local
cache) runs the same stages while the first is in the middle of uploading an artifact file, held
at a relay (delay_proxy.py, `hold_puts_under`) so the upload is provably in flight for the whole
of the reader's run. The reader finds no record (files go up first, the record last): a miss
without a word, the stages run, its result is right; once the upload goes on, the two writers
leave one complete entry per key, and a third machine gets every stage from the remote.

Before the order files-then-record (a record written first), the reader found a record whose
file was not there: a refused entry and a warning line, which this test counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.cache_remote.delay_proxy import DelayProxy
from tests.cache_remote.s3_server import BUCKET, new_prefix
from tests.cache_remote.test_remote_command import SMALL, outputs, remote_lines
from tests.cli_helpers import run_trtpipe

STAGES = ["sanitize", "upgrade_opset"]


def test_a_reader_during_an_upload_misses_then_runs_and_one_complete_entry_stays(s3, tmp_path):
    url = f"s3://{BUCKET}/{new_prefix()}"
    prefix = url.removeprefix(f"s3://{BUCKET}/") + "/"
    link = DelayProxy(s3.endpoint, hold_puts_under=b"/files/")
    command = [sys.executable, "-m", "trtpipe", *SMALL, f"cache.remote={url}", f"hydra.run.dir={tmp_path / 'writer'}"]
    env = {**os.environ, **s3.env(AWS_ENDPOINT_URL=link.endpoint), "TRTPIPE_CACHE": str(tmp_path / "c-writer")}
    with subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as writer:
        try:
            assert link.holding.wait(120), "the writer never began an upload"
            reader = run_trtpipe(tmp_path, *SMALL, f"cache.remote={url}", cache=tmp_path / "c-reader",
                                 run_name="reader", env=s3.env())
            assert writer.poll() is None  # the writer's upload was in flight for the whole of the reader's run
        finally:
            link.release()
        _, writer_stderr = writer.communicate(timeout=120)
    link.close()
    assert b"/files/" in link.held_line
    assert (writer.returncode, reader.code) == (0, 0), writer_stderr + reader.stderr
    assert remote_lines(writer_stderr + reader.stderr) == []  # nothing refused, nothing unusable
    assert [(s["status"], s["origin"]) for s in reader.manifest["stages"]] == [("ran", "local")] * len(STAGES)
    first = json.loads((tmp_path / "writer" / "manifest.json").read_text())
    assert outputs(reader) == {s["name"]: {k: v["sha256"] for k, v in s["outputs"].items()} for s in first["stages"]}
    for index, stage in enumerate(STAGES):  # each key's record written once, by whichever writer was first
        seen = [first["stages"][index], reader.manifest["stages"][index]]
        assert [s["remote"].get("upload") for s in seen].count("uploaded") == 1 or seen[0]["origin"] == "remote", seen
    records = sorted(k.split("/")[-2] for k in s3.objects(prefix) if "/entries/" in k)
    assert records == STAGES
    third = run_trtpipe(tmp_path, *SMALL, f"cache.remote={url}", cache=tmp_path / "c-third", run_name="third",
                        env=s3.env())
    assert [s["origin"] for s in third.manifest["stages"]] == ["remote"] * len(STAGES)
    assert outputs(third) == outputs(reader) and remote_lines(third.stderr) == []
