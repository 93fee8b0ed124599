"""The remote tier against a real S3 server on loopback (s3_server.py), through the local cache
(`ArtifactCache(remote=...)`): hits, and each fault ending in a miss or a complete entry, one
line, and the right bytes. The whole command is run in test_remote_command.py."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from tests.cache_remote.cutting_proxy import CuttingProxy
from tests.cache_remote.s3_server import BUCKET, another_server
from trtpipe.cache.cache import ArtifactCache, cache_key
from trtpipe.cache.remote.tier import RemoteTier
from trtpipe.errors import UserError

MATERIAL = {"stage": "sanitize", "version": "1", "config": {"fold_constants": True},
            "inputs": {"model": "0" * 64}, "tools": {"onnx": "1.16.0"}}
KEY = cache_key(MATERIAL)
REMOTE_LOGGER = "trtpipe.cache.remote.tier"


def writes(text: str, calls: list | None = None):
    """A stage computation writing `text` (and a second, constant file); `calls` counts its runs."""
    def compute(out_dir: Path) -> dict:
        if calls is not None:
            calls.append(text)
        (out_dir / "model.bin").write_text(text)
        (out_dir / "notes.txt").write_text("constant notes")
        return {"outputs": {"model": "model.bin"}, "summary": f"wrote {text}"}
    return compute


def cache_at(path: Path, url: str, mode: str = "readwrite") -> ArtifactCache:
    return ArtifactCache(path, remote=RemoteTier(url, mode))


def remote_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == REMOTE_LOGGER and r.levelno >= logging.WARNING]


def prefix_of(url: str) -> str:
    return url.removeprefix(f"s3://{BUCKET}/") + "/"


def blob_key(url: str, digest: str) -> str:
    return f"{prefix_of(url)}files/{digest[:2]}/{digest}"


def test_a_second_cache_is_filled_from_the_remote(tmp_path, remote_url, aws_env, caplog):
    first = cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    assert (first.status, first.origin, first.upload) == ("ran", "local", "uploaded")
    stored = aws_env.objects(prefix_of(remote_url))
    record_key = f"{prefix_of(remote_url)}entries/sanitize/{KEY}.json"
    assert stored[record_key] == (first.entry.directory / "entry.json").read_bytes()
    assert stored[blob_key(remote_url, first.entry.output_digest("model"))] == b"model bytes"
    calls: list = []
    second = cache_at(tmp_path / "b", remote_url).get_or_compute("sanitize", MATERIAL, writes("other", calls))
    assert (second.status, second.origin, calls) == ("cached", "remote", [])
    assert second.entry.directory.parent.parent.parent == tmp_path / "b"  # published into the local cache
    assert second.entry.output_path("model").read_bytes() == b"model bytes"
    assert second.transfer.downloaded == len(stored[record_key]) + len(b"model bytes") + len(b"constant notes")
    third = cache_at(tmp_path / "b", remote_url).get_or_compute("sanitize", MATERIAL, writes("other", calls))
    assert (third.status, third.origin, calls) == ("cached", "local", [])  # now a local hit
    assert remote_warnings(caplog) == []


@pytest.mark.parametrize("damage", ["altered", "truncated"])
def test_a_damaged_file_on_the_remote_is_a_miss_never_used(tmp_path, remote_url, aws_env, caplog, damage):
    first = cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    blob = blob_key(remote_url, first.entry.output_digest("model"))
    aws_env.client().put_object(Bucket=BUCKET, Key=blob, Body=b"MODEL BYTES" if damage == "altered" else b"model")
    calls: list = []
    second = cache_at(tmp_path / "b", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes", calls))
    assert (second.status, second.origin, calls) == ("ran", "local", ["model bytes"])
    assert second.entry.output_path("model").read_bytes() == b"model bytes"
    [line] = remote_warnings(caplog)
    assert "model.bin does not match its recorded sha256" in line and "a miss" in line
    assert not list((tmp_path / "b" / "tmp").iterdir())  # the refused download is gone
    # The rebuild's upload sent the good bytes again: the remote is whole for the next host.
    assert aws_env.objects(prefix_of(remote_url))[blob] == b"model bytes"
    third = cache_at(tmp_path / "c", remote_url).get_or_compute("sanitize", MATERIAL, writes("never", calls))
    assert (third.origin, calls) == ("remote", ["model bytes"])


def test_a_record_without_its_files_is_a_miss(tmp_path, remote_url, aws_env, caplog):
    first = cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    aws_env.client().delete_object(Bucket=BUCKET, Key=blob_key(remote_url, first.entry.output_digest("model")))
    calls: list = []
    second = cache_at(tmp_path / "b", remote_url, "read").get_or_compute("sanitize", MATERIAL,
                                                                          writes("model bytes", calls))
    assert (second.status, calls) == ("ran", ["model bytes"])
    [line] = remote_warnings(caplog)
    assert "its file model.bin" in line and "is not on the remote" in line


def test_a_planted_record_naming_paths_outside_the_entry_is_a_miss(tmp_path, remote_url, aws_env, caplog):
    import json

    record = {"stage": "sanitize", "key": KEY, "material": MATERIAL, "files": {"../../escape.txt": "a" * 64},
              "outputs": {"model": {"file": "../../escape.txt", "sha256": "a" * 64}}}
    aws_env.client().put_object(Bucket=BUCKET, Key=f"{prefix_of(remote_url)}entries/sanitize/{KEY}.json",
                                Body=json.dumps(record).encode())
    second = cache_at(tmp_path / "b", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    assert second.status == "ran"
    [line] = remote_warnings(caplog)
    assert "is not a plain name inside the entry" in line
    assert not list(tmp_path.rglob("escape.txt"))
    assert cache_at(tmp_path / "c", remote_url).get_or_compute("sanitize", MATERIAL, writes("never")).origin \
        == "remote"  # the rebuild's record replaced the planted one


def test_read_mode_reads_and_never_writes(tmp_path, remote_url, aws_env):
    reader = cache_at(tmp_path / "r", remote_url, "read")
    alone = reader.get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    assert (alone.status, alone.upload) == ("ran", None)
    assert aws_env.objects(prefix_of(remote_url)) == {}
    cache_at(tmp_path / "w", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    filled = cache_at(tmp_path / "r2", remote_url, "read").get_or_compute("sanitize", MATERIAL, writes("never"))
    assert filled.origin == "remote"


def test_write_mode_writes_and_never_reads(tmp_path, remote_url, aws_env):
    cache_at(tmp_path / "a", remote_url, "write").get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    assert len(aws_env.objects(prefix_of(remote_url))) == 3  # two files, one record
    calls: list = []
    second = cache_at(tmp_path / "b", remote_url, "write").get_or_compute("sanitize", MATERIAL,
                                                                           writes("model bytes", calls))
    assert (second.status, second.origin, second.upload, calls) == ("ran", "local", "present", ["model bytes"])


def test_two_writers_racing_on_one_key_leave_one_complete_entry(tmp_path, remote_url, aws_env):
    """Two hosts build the same key into different bytes (an engine is not byte-reproducible) and
    upload at once: the first record stays, the other host keeps its entry local."""
    both_built = threading.Barrier(2, timeout=30)
    results = {}

    def host(name: str) -> None:
        def compute(out_dir: Path) -> dict:
            (out_dir / "model.bin").write_text(f"engine built by {name}")
            both_built.wait()  # neither uploads before both have built
            return {"outputs": {"model": "model.bin"}}
        results[name] = cache_at(tmp_path / name, remote_url).get_or_compute("sanitize", MATERIAL, compute)

    threads = [threading.Thread(target=host, args=(name,)) for name in ("host1", "host2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(r.upload for r in results.values()) == ["present", "uploaded"]
    [winner] = [name for name, r in results.items() if r.upload == "uploaded"]
    stored = aws_env.objects(prefix_of(remote_url))
    assert stored[f"{prefix_of(remote_url)}entries/sanitize/{KEY}.json"] == \
        (results[winner].entry.directory / "entry.json").read_bytes()
    fetched = cache_at(tmp_path / "third", remote_url).get_or_compute("sanitize", MATERIAL, writes("never"))
    assert fetched.origin == "remote"
    assert fetched.entry.output_path("model").read_text() == f"engine built by {winner}"


def test_a_wrong_credential_is_one_line_and_the_stages_run_locally(tmp_path, remote_url, aws_env, monkeypatch,
                                                                     caplog):
    cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    cache = cache_at(tmp_path / "b", remote_url)
    results = [cache.get_or_compute("sanitize", {**MATERIAL, "version": v}, writes(f"v{v}")) for v in ("1", "2")]
    assert [(r.status, r.upload) for r in results] == [("ran", None), ("ran", None)]
    assert results[0].entry.output_path("model").read_text() == "v1"
    [line] = remote_warnings(caplog)  # one line for the run, not one per stage
    assert "is not usable (SignatureDoesNotMatch" in line and "local cache only" in line
    assert line.endswith("; to use it: check the credential (AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")


def test_a_missing_bucket_is_one_line_that_names_the_bucket_to_create(tmp_path, aws_env, caplog):
    """Found by a new user: `NoSuchBucket: The specified bucket does not exist` named no setting."""
    cache = cache_at(tmp_path / "a", "s3://no-such-bucket-here/trtpipe")
    result = cache.get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    assert (result.status, result.upload) == ("ran", None)
    [line] = remote_warnings(caplog)
    assert "is not usable (NoSuchBucket" in line and "looking up sanitize" in line
    assert line.endswith("; to use it: create the bucket no-such-bucket-here, or name one that exists in "
                         "cache.remote=s3://BUCKET/PREFIX")


def test_a_server_gone_midway_is_one_line_and_a_correct_result(tmp_path, remote_url, aws_env, monkeypatch, caplog):
    """A hit from a server that then stops: the next stage's lookup fails (one line), it runs, and
    nothing more is tried; then a server stopping between a build and its upload."""
    cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    going = another_server(aws_env)
    monkeypatch.setenv("AWS_ENDPOINT_URL", going.endpoint)
    cache = cache_at(tmp_path / "b", remote_url)
    hit = cache.get_or_compute("sanitize", MATERIAL, writes("never"))
    assert hit.origin == "remote"
    going.stop()
    later = [cache.get_or_compute("sanitize", {**MATERIAL, "version": v}, writes(f"v{v}")) for v in ("2", "3")]
    assert [(r.status, r.entry.output_path("model").read_text()) for r in later] == [("ran", "v2"), ("ran", "v3")]
    [line] = remote_warnings(caplog)
    assert "is not usable (Could not connect" in line and "looking up sanitize" in line
    assert "; to use it: check AWS_ENDPOINT_URL" in line

    caplog.clear()
    stopping = another_server(aws_env)
    monkeypatch.setenv("AWS_ENDPOINT_URL", stopping.endpoint)

    def stops_the_server(out_dir: Path) -> dict:
        stopping.stop()  # the lookup found nothing; the upload finds no server
        return writes("v4")(out_dir)

    built = cache_at(tmp_path / "c", remote_url).get_or_compute("sanitize", {**MATERIAL, "version": "4"},
                                                                 stops_the_server)
    assert (built.status, built.upload, built.entry.output_path("model").read_text()) == ("ran", "failed", "v4")
    [line] = remote_warnings(caplog)
    assert "uploading sanitize" in line
    key4 = cache_key({**MATERIAL, "version": "4"})
    assert f"{prefix_of(remote_url)}entries/sanitize/{key4}.json" not in aws_env.objects(prefix_of(remote_url))


@pytest.mark.parametrize("url", ["http://bucket/prefix", "s3://", "s3://Bad_Bucket/x", "s3://bucket/a/../b"])
def test_a_remote_that_is_not_an_s3_address_is_refused(url):
    with pytest.raises(UserError, match="cache.remote"):
        RemoteTier(url, "readwrite")


def test_a_missing_boto3_is_one_line_with_the_pip_command(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "boto3", None)  # what `import boto3` meets where it is not installed
    with pytest.raises(UserError) as error:
        RemoteTier("s3://bucket/prefix", "readwrite")
    assert "boto3" in str(error.value) and "pip install 'boto3>=" in error.value.fix


@pytest.mark.parametrize("dies", [False, True], ids=["link-cut", "server-stops"])
def test_a_download_cut_midway_is_one_line_and_nothing_of_it_is_kept(tmp_path, remote_url, aws_env, through,
                                                                      monkeypatch, caplog, dies):
    """The server goes away while it sends a file: the connection drops after 64 kB of it, and
    with `dies` every later connection is refused (the server stopped). The entry on the remote
    is untouched: a later host gets it whole."""
    big = "x" * 300_000
    cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes(big))
    proxy = through(CuttingProxy, cut_gets_after=64_000, dies=dies)
    calls: list = []
    result = cache_at(tmp_path / "b", remote_url).get_or_compute("sanitize", MATERIAL, writes(big, calls))
    assert proxy.cuts >= 1
    assert (result.status, result.origin, len(calls)) == ("ran", "local", 1)
    assert result.entry.output_path("model").read_text() == big
    [line] = remote_warnings(caplog)
    assert "is not usable (" in line and "looking up sanitize" in line
    assert not list((tmp_path / "b" / "tmp").iterdir())
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws_env.endpoint)
    later = cache_at(tmp_path / "c", remote_url).get_or_compute("sanitize", MATERIAL, writes("never", calls))
    assert (later.origin, later.entry.output_path("model").read_text(), len(calls)) == ("remote", big, 1)


def test_a_record_cut_short_is_one_line_and_never_replaced(tmp_path, remote_url, aws_env, through, caplog):
    """The link drops while the record comes (after 100 bytes of it): the remote is not usable
    (one line), the stage runs, and the good record stays; it was read with one `read`, which
    returned the bytes received: refused as "not JSON", and replaced by the writer's rebuild."""
    cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    record_key = f"{prefix_of(remote_url)}entries/sanitize/{KEY}.json"
    record = aws_env.objects(prefix_of(remote_url))[record_key]
    proxy = through(CuttingProxy, cut_gets_after=100, cut_under=b"/entries/")
    result = cache_at(tmp_path / "b", remote_url).get_or_compute("sanitize", MATERIAL, writes("other bytes"))
    assert proxy.cuts >= 1
    assert (result.status, result.upload, result.entry.output_path("model").read_text()) == ("ran", None,
                                                                                         "other bytes")
    [line] = remote_warnings(caplog)
    assert "is not usable (" in line and "looking up sanitize" in line
    assert aws_env.objects(prefix_of(remote_url))[record_key] == record


def test_files_without_their_record_are_a_miss_until_the_record_is_written(tmp_path, remote_url, aws_env, caplog):
    """A writer stopped between its files and its record, or a reader during an upload: the files
    are there, the record is not: a miss without a word; once the record is written, a hit."""
    from trtpipe.cache.remote.location import parse_remote
    from trtpipe.cache.remote.s3_store import S3Store

    entry = ArtifactCache(tmp_path / "writer").get_or_compute("sanitize", MATERIAL, writes("model bytes")).entry
    location, store = parse_remote(remote_url), S3Store(parse_remote(remote_url).bucket)
    for name, digest in entry.record["files"].items():
        store.upload(location.file_key(digest), entry.directory / name)
    calls: list = []
    during = cache_at(tmp_path / "reader1", remote_url, "read").get_or_compute("sanitize", MATERIAL,
                                                                                writes("model bytes", calls))
    assert (during.status, calls) == ("ran", ["model bytes"]) and remote_warnings(caplog) == []
    assert store.put_if_absent(location.record_key("sanitize", KEY), (entry.directory / "entry.json").read_bytes())
    after = cache_at(tmp_path / "reader2", remote_url, "read").get_or_compute("sanitize", MATERIAL, writes("never"))
    assert after.origin == "remote" and after.entry.output_path("model").read_text() == "model bytes"


def test_a_record_too_large_to_be_one_is_refused_unread(tmp_path, remote_url, aws_env, caplog, monkeypatch):
    from trtpipe.cache.remote import fetch

    monkeypatch.setattr(fetch, "RECORD_LIMIT", 1 << 20)  # the real limit (16 MiB) is slow to upload here
    aws_env.client().put_object(Bucket=BUCKET, Key=f"{prefix_of(remote_url)}entries/sanitize/{KEY}.json",
                                Body=b" " * ((1 << 20) + 1))
    result = cache_at(tmp_path / "b", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    assert result.status == "ran"
    [line] = remote_warnings(caplog)
    assert "its record is over 1 MiB" in line


def test_a_refused_record_is_replaced_by_the_rebuild_of_a_writer(tmp_path, remote_url, aws_env, caplog):
    """Host A's engine lost a file on the remote; host B's engine (other bytes: an engine is not
    byte-reproducible) cannot bring it back, so B's upload replaces A's record, and C hits B's."""
    first = cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes("engine of host A"))
    aws_env.client().delete_object(Bucket=BUCKET, Key=blob_key(remote_url, first.entry.output_digest("model")))
    second = cache_at(tmp_path / "b", remote_url).get_or_compute("sanitize", MATERIAL, writes("engine of host B"))
    assert (second.status, second.upload) == ("ran", "uploaded")
    calls: list = []
    third = cache_at(tmp_path / "c", remote_url).get_or_compute("sanitize", MATERIAL, writes("never", calls))
    assert (third.origin, calls, third.entry.output_path("model").read_text()) == ("remote", [], "engine of host B")
    assert len(remote_warnings(caplog)) == 1  # B's refusal; C says nothing


def test_a_server_gone_between_the_files_and_the_record_leaves_no_record(tmp_path, remote_url, aws_env, through,
                                                                         monkeypatch, caplog):
    """The upload's files went up, then the server goes away as the record is sent (its PUT cut):
    one line, no record (a reader misses), the entry stays local; the next writer's upload sends
    the record, and a third host hits the whole entry."""
    proxy = through(CuttingProxy, cut_record_puts=True)
    built = cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes"))
    assert proxy.cuts >= 1
    assert (built.status, built.upload, built.entry.output_path("model").read_text()) == ("ran", "failed",
                                                                                        "model bytes")
    [line] = remote_warnings(caplog)
    assert "is not usable (" in line and "uploading sanitize" in line
    stored = aws_env.objects(prefix_of(remote_url))
    assert blob_key(remote_url, built.entry.output_digest("model")) in stored  # the files went up
    assert not [k for k in stored if "/entries/" in k]  # the record did not
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws_env.endpoint)
    calls: list = []
    again = cache_at(tmp_path / "b", remote_url).get_or_compute("sanitize", MATERIAL, writes("model bytes", calls))
    assert (again.status, again.upload, calls) == ("ran", "uploaded", ["model bytes"])
    third = cache_at(tmp_path / "c", remote_url).get_or_compute("sanitize", MATERIAL, writes("never"))
    assert third.origin == "remote" and third.entry.output_path("model").read_text() == "model bytes"


def test_a_file_over_the_part_size_goes_up_in_parts_and_comes_back_whole(tmp_path, remote_url, aws_env,
                                                                         monkeypatch):
    """Above `_PART_BYTES` (64 MiB) a file is a multipart upload; 5 MiB parts here (S3's smallest)."""
    from trtpipe.cache.remote import s3_store

    monkeypatch.setattr(s3_store, "_PART_BYTES", 5 << 20)
    big = "".join(f"{i:08d}" for i in range(1_500_000))  # 12 MB, 3 parts, every part different
    first = cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes(big))
    assert first.upload == "uploaded"
    stored = aws_env.client().head_object(Bucket=BUCKET, Key=blob_key(remote_url, first.entry.output_digest("model")))
    assert stored["ETag"].strip('"').endswith("-3")  # S3's mark of an object made of 3 parts
    second = cache_at(tmp_path / "b", remote_url).get_or_compute("sanitize", MATERIAL, writes("never"))
    assert second.origin == "remote" and second.entry.output_path("model").read_text() == big
