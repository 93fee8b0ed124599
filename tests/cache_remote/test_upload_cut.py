"""The server stopped, or the link cut, in the middle of an artifact file's upload (issue 34,
item 2's first fault): a single PUT, and one part of a multipart upload. Each ends in one line,
the stage's local result, no record of the key on the remote (a later host misses, then its
upload makes a complete entry), no multipart upload left open, and nothing half-sent ever used.
The server going away mid-download is in test_remote_tier.py (a download cut midway)."""

from __future__ import annotations

import pytest

from tests.cache_remote.cutting_proxy import CuttingProxy
from tests.cache_remote.s3_server import BUCKET
from tests.cache_remote.test_remote_tier import MATERIAL, blob_key, cache_at, prefix_of, remote_warnings, writes
from trtpipe.cache.remote import s3_store

BIG = "".join(f"{i:07d}\n" for i in range(40_000))  # 320 kB: several reads of the relay


def open_uploads(server, url: str) -> list[dict]:
    """The multipart uploads begun and neither completed nor aborted under the test's prefix."""
    listed = server.client().list_multipart_uploads(Bucket=BUCKET, Prefix=prefix_of(url))
    return listed.get("Uploads", [])


def later_hosts_miss_then_fill(tmp_path, url: str, text: str, server, monkeypatch) -> None:
    """With the server back: a reader misses without a word, a writer builds and uploads a complete
    entry, and a third host gets its bytes."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    calls: list = []
    reader = cache_at(tmp_path / "reader", url, "read").get_or_compute("sanitize", MATERIAL, writes(text, calls))
    assert (reader.status, reader.origin, calls) == ("ran", "local", [text])
    writer = cache_at(tmp_path / "writer", url).get_or_compute("sanitize", MATERIAL, writes(text))
    assert (writer.status, writer.upload) == ("ran", "uploaded")
    third = cache_at(tmp_path / "third", url).get_or_compute("sanitize", MATERIAL, writes("never", calls))
    assert (third.origin, third.entry.output_path("model").read_text(), calls) == ("remote", text, [text])


@pytest.mark.parametrize("dies", [True, False], ids=["server-stops", "link-cut"])
def test_a_put_cut_midway_leaves_no_record_and_a_later_host_misses(tmp_path, remote_url, aws_env, through,
                                                                   monkeypatch, caplog, dies):
    """The file's PUT reaches the server with its headers and 100 kB of its 320 kB body, then the
    server stops (every later connection refused) or the link drops (each attempt cut)."""
    proxy = through(CuttingProxy, cut_puts_after=100_000, dies=dies)
    built = cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes(BIG))
    assert proxy.cut_lines and all(b"/files/" in line for line in proxy.cut_lines)
    assert (built.status, built.upload, built.entry.output_path("model").read_text()) == ("ran", "failed", BIG)
    [line] = remote_warnings(caplog)
    assert "is not usable (" in line and "uploading sanitize" in line
    stored = aws_env.objects(prefix_of(remote_url))
    assert not [k for k in stored if "/entries/" in k]  # no record: nobody can find the entry
    assert blob_key(remote_url, built.entry.output_digest("model")) not in stored  # a short PUT stores nothing
    later_hosts_miss_then_fill(tmp_path, remote_url, BIG, aws_env, monkeypatch)
    assert len(remote_warnings(caplog)) == 1  # nothing half-sent was found, so nothing refused


@pytest.mark.parametrize("dies", [False, True], ids=["link-cut", "server-stops"])
def test_a_part_cut_midway_aborts_the_upload_and_stops_the_other_parts(tmp_path, remote_url, aws_env, through,
                                                                       monkeypatch, caplog, dies):
    """A multipart upload whose every part's PUT is cut after 50 kB (parts of 64 kB here, 6 of
    them: S3 checks the 5 MiB minimum only when an upload completes, which this one never does).
    The upload is aborted (no parts left on the server, billed until a lifecycle rule removes
    them), and once one part failed no part not yet begun is sent: only the 4 under way are.
    A server that stops at the first cut cannot be told to abort: its upload stays open, the one
    thing a lifecycle rule (AbortIncompleteMultipartUpload) must clean (docs/cache.md)."""
    monkeypatch.setattr(s3_store, "_PART_BYTES", 64 << 10)
    proxy = through(CuttingProxy, cut_puts_after=50_000, cut_under=b"partNumber=", dies=dies)
    text = "".join(f"{i:07d}\n" for i in range(49_000))  # 392 kB: 6 parts, the last one short
    built = cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes(text))
    assert (built.status, built.upload, built.entry.output_path("model").read_text()) == ("ran", "failed", text)
    [line] = remote_warnings(caplog)
    assert "is not usable (" in line and "uploading sanitize" in line
    assert len(open_uploads(aws_env, remote_url)) == (1 if dies else 0)
    begun = {line.split(b"partNumber=")[1].split(b"&")[0].split(b" ")[0] for line in proxy.cut_lines}
    assert len(begun) <= 4, begun  # the 4 parts under way when the first failed, no more
    stored = aws_env.objects(prefix_of(remote_url))
    assert not [k for k in stored if "/entries/" in k] and blob_key(remote_url, built.entry.output_digest("model")) \
        not in stored
    monkeypatch.setattr(s3_store, "_PART_BYTES", 64 << 20)  # a part of 64 kB would be refused at completion
    later_hosts_miss_then_fill(tmp_path, remote_url, text, aws_env, monkeypatch)
