"""A slow link between a builder and the remote (delay_proxy.py; issue 34, item 2's last fault): a
link that is slow but moves gives a complete entry and the right bytes; a link slower than the
client's timeouts (a stall) or than its low-speed floor (a trickle: bytes keep coming, so no read
timeout fires) is one line and a miss within seconds, never a hang. The timeouts are shortened
here (the real ones are minutes); each test that waits does so in a thread with a bound, so a hang
is a failure, not a stuck suite."""

from __future__ import annotations

import threading
import time

import pytest

from tests.cache_remote.delay_proxy import DelayProxy
from tests.cache_remote.test_remote_tier import MATERIAL, cache_at, prefix_of, remote_warnings, writes
from trtpipe.cache.remote import s3_store

BIG = "x" * 300_000  # several reads and many pieces of the proxy


@pytest.fixture
def slow_link(through):
    """slow_link(latency=, rate=, piece=): a DelayProxy in front of the server, this process's endpoint."""
    return lambda **link: through(DelayProxy, **link)


@pytest.fixture
def short_timeouts(monkeypatch):
    """Seconds instead of minutes: read timeout 1 s, connect 1 s, floor 50 kB/s over 1 s."""
    for name, value in (("READ_TIMEOUT", 1), ("CONNECT_TIMEOUT", 1), ("LOW_SPEED_LIMIT", 50_000),
                        ("LOW_SPEED_TIME", 1)):
        monkeypatch.setattr(s3_store, name, value)


def bounded(call, seconds: float):
    """call() in a thread: its result and how long it took; a failure when it is still running after
    `seconds` (the run would hang)."""
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as error:  # re-raised below, in the test's thread
            box["error"] = error

    started = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting on the remote after {seconds} s: a hang"
    if "error" in box:
        raise box["error"]
    return box["result"], time.monotonic() - started


def test_a_slow_link_that_moves_gives_a_complete_entry_and_the_right_bytes(tmp_path, remote_url, slow_link,
                                                                          aws_env, caplog):
    proxy = slow_link(latency=0.05, rate=400_000, piece=16_384)  # 50 ms a read, 400 kB/s each way
    first = cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes(BIG))
    assert first.upload == "uploaded"
    calls: list = []
    second, seconds = bounded(lambda: cache_at(tmp_path / "b", remote_url).get_or_compute(
        "sanitize", MATERIAL, writes("never", calls)), 60)
    assert (second.status, second.origin, calls) == ("cached", "remote", [])
    assert second.entry.output_path("model").read_text() == BIG
    assert seconds >= len(BIG) / proxy.rate  # the link was slow
    assert proxy.forwarded >= 2 * len(BIG)  # up, then down, through the proxy
    assert remote_warnings(caplog) == []


def test_a_link_that_stalls_is_one_line_and_a_miss(tmp_path, remote_url, aws_env, slow_link, short_timeouts,
                                                   caplog):
    """Every read waits 4 s, longer than the read timeout: the lookup gives up after its attempts
    (1 s each), the stage runs here, the other stages do not ask again."""
    cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes(BIG))
    slow_link(latency=4)
    cache = cache_at(tmp_path / "b", remote_url)
    calls: list = []
    results, seconds = bounded(lambda: [cache.get_or_compute("sanitize", {**MATERIAL, "version": v},
                                                             writes(f"v{v}", calls)) for v in ("1", "2")], 30)
    assert [(r.status, r.origin) for r in results] == [("ran", "local"), ("ran", "local")]
    assert results[0].entry.output_path("model").read_text() == "v1" and calls == ["v1", "v2"]
    [line] = remote_warnings(caplog)
    assert "is not usable (Read timeout" in line and "looking up sanitize" in line
    assert seconds < 4 * s3_store.ATTEMPTS + 10  # the attempts' read timeouts, not the stall's length
    assert not list((tmp_path / "b" / "tmp").iterdir())


def test_an_upload_over_a_link_that_stalls_is_one_line_and_the_entry_stays_local(tmp_path, remote_url, aws_env,
                                                                               slow_link, short_timeouts, caplog):
    slow_link(latency=4)
    built, _ = bounded(lambda: cache_at(tmp_path / "w", remote_url, "write").get_or_compute(
        "sanitize", MATERIAL, writes(BIG)), 30)
    assert (built.status, built.upload, built.entry.output_path("model").read_text()) == ("ran", "failed", BIG)
    [line] = remote_warnings(caplog)
    assert "is not usable (" in line and "uploading sanitize" in line
    assert not [k for k in aws_env.objects(prefix_of(remote_url)) if "/entries/" in k]  # no record without files


def test_a_link_that_trickles_is_one_line_and_a_miss_not_a_hang(tmp_path, remote_url, aws_env, slow_link,
                                                                short_timeouts, caplog):
    """5 kB/s in pieces of 500 bytes: a byte every 0.1 s, so the 1 s read timeout never fires, and
    the 300 kB file would take a minute (a 121 MB engine 7 hours). Below the floor (50 kB/s here)
    for a window (1 s), the download is given up: one line, the stage runs, nothing is kept.
    Before the floor (low_speed.py) this test failed: still downloading after 20 s."""
    cache_at(tmp_path / "a", remote_url).get_or_compute("sanitize", MATERIAL, writes(BIG))
    slow_link(rate=5_000, piece=500)
    calls: list = []
    result, seconds = bounded(lambda: cache_at(tmp_path / "b", remote_url).get_or_compute(
        "sanitize", MATERIAL, writes(BIG, calls)), 20)
    assert (result.status, result.origin, len(calls)) == ("ran", "local", 1)
    assert result.entry.output_path("model").read_text() == BIG
    [line] = remote_warnings(caplog)
    assert "is not usable (the link moved" in line and "below the 50.0 kB/s" in line and "looking up sanitize" in line
    assert seconds < 10
    assert not list((tmp_path / "b" / "tmp").iterdir())


def test_an_upload_over_a_link_that_trickles_is_given_up_in_seconds(tmp_path, remote_url, aws_env, slow_link,
                                                                    short_timeouts, monkeypatch, caplog):
    """16 MB at 20 kB/s (13 minutes), more than the kernel's socket buffers hold. A block's send
    has the connect timeout (urllib3), here long enough for a block at that rate: only the floor,
    counted by the body's reads (GuardedPart), ends the upload. With boto3's progress callback
    instead (every 256 KiB, and after a retry only past the point reached before), this test
    failed: still uploading after 60 s."""
    monkeypatch.setattr(s3_store, "CONNECT_TIMEOUT", 30)
    slow_link(rate=20_000, piece=1000)
    built, seconds = bounded(lambda: cache_at(tmp_path / "w", remote_url, "write").get_or_compute(
        "sanitize", MATERIAL, writes("y" * 16_000_000)), 60)
    assert (built.status, built.upload) == ("ran", "failed") and seconds < 30
    [line] = remote_warnings(caplog)
    assert "is not usable (the link moved" in line and "uploading sanitize" in line
    assert not [k for k in aws_env.objects(prefix_of(remote_url)) if "/entries/" in k]
