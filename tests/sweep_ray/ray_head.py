"""A local Ray head on 127.0.0.1 for the Ray sweep tests (`ray start --head`, the `ray` extra, which
the test extra lists), stopped with everything it started.

Decisions:
- Loopback only. Ray replaces 127.0.0.1 by the address of the machine's network interface unless
  `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (then the node address is the loopback one, Ray 2.60's
  `get_node_ip_address`): set for the head and for the sweep's own process, which otherwise
  connects to the interface address. The client server and the dashboard get free ports (their
  defaults are fixed), the client server's above Ray's worker port range (10002-19999).
- Its own temporary directory (`--temp-dir`, short: Ray's Unix sockets live under it) and its own
  session (`start_new_session`): `ray start` leaves daemons (GCS, raylet, agents) in its process
  group; teardown signals that group only (SIGTERM, then SIGKILL after 3 s: a test cluster keeps nothing), never by name
  (`ray stop` finds every Ray process of the user).
- The head's environment is a cluster node's: the AWS credentials of the test server (nodes carry
  their own, trtpipe never forwards them), but no TRTPIPE_CACHE and no AWS endpoint, region or config
  file: those must come from the sweep's process (trtpipe/sweep_launch.py), or the jobs would use
  another cache and another S3 endpoint, which the tests would see.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@dataclass
class RayHead:
    address: str
    group: int
    temp_dir: Path

    def driver_env(self) -> dict[str, str]:
        """What the sweep's process needs to join this head on loopback."""
        return {"RAY_ADDRESS": self.address, **LOOPBACK_ONLY}

    def stop(self) -> None:
        for signum, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.group, signum)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while _group_alive(self.group) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not _group_alive(self.group):
                break
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def start_head(credentials: dict[str, str]) -> RayHead:
    ray = Path(sys.executable).with_name("ray")
    if not ray.exists():
        raise AssertionError(f"{ray} is missing: the Ray sweep tests need the ray extra: pip install '.[test]'")
    temp_dir = Path(tempfile.mkdtemp(prefix="trtray-", dir="/tmp"))
    port, dashboard, agent = (_free_port() for _ in range(3))
    client = _free_port(low=20000)
    env = {name: value for name, value in os.environ.items()
           if name != "TRTPIPE_CACHE" and not name.startswith(("AWS_", "RAY_"))}
    env.update(LOOPBACK_ONLY, **{name: credentials[name] for name in CREDENTIALS})
    command = [str(ray), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
               "--include-dashboard=false", f"--dashboard-port={dashboard}", f"--dashboard-agent-listen-port={agent}",
               f"--ray-client-server-port={client}", f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    started = subprocess.Popen(command, cwd=temp_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    head = RayHead(f"127.0.0.1:{port}", started.pid, temp_dir)
    try:
        output, _ = started.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        head.stop()
        raise
    if started.returncode != 0:
        head.stop()
        raise AssertionError(f"ray start failed ({started.returncode}):\n{output}")
    return head


def _free_port(low: int = 0) -> int:
    for port in ([0] if not low else range(low, low + 2000)):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise AssertionError(f"no free port from {low}")


def _group_alive(group: int) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":  # fields: state, ppid, pgrp
            return True
    return False
