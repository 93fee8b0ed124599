"""Headless Chromium driven over its DevTools pipe (`--remote-debugging-pipe`), standard library only.

Chromium reads DevTools protocol commands from fd 3 and writes replies and events to fd 4, each
message JSON ended by a NUL byte (the transport Puppeteer and Playwright use). Decisions:
- the pipe, not the WebSocket endpoint: no port, no extra package (websocket-client), nothing
  downloaded at run time; the browser is Debian's `chromium` package;
- `--no-sandbox`: the browser only opens the site we just built, from disk, and its sandbox
  cannot start as root (CI here) nor in many containers without user namespaces;
- one reader thread splits the stream into messages; replies wait on their id, events queue up
  for the caller, which drains them per page (`events`);
- flattened sessions (`Target.attachToTarget` with `flatten`): one page, commands carry its
  `sessionId`.
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    """$TRTPIPE_CHROMIUM, else the first of CANDIDATES on PATH."""
    named = os.environ.get("TRTPIPE_CHROMIUM")
    if named:
        return shutil.which(named) or (named if os.access(named, os.X_OK) else None)
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


class BrowserError(RuntimeError):
    pass


class Chromium:
    """`with Chromium(path, width, height) as browser:` one headless page, `browser.send(method, **params)`."""

    def __init__(self, binary: str, width: int = 1280, height: int = 900):
        self._profile = tempfile.TemporaryDirectory(prefix="trtpipe-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def child_fds():  # the browser's fd 3 reads our commands, its fd 4 carries its messages
            read_end = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        args = [binary, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update", "--mute-audio",
                "--disable-dev-shm-usage",  # containers often give /dev/shm 64 MB: the browser would crash
                "--allow-file-access-from-files", f"--user-data-dir={self._profile.name}",
                f"--window-size={width},{height}", "about:blank"]
        self._process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, preexec_fn=child_fds, pass_fds=(3, 4))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._replies: dict[int, queue.Queue] = {}
        self._lock = threading.Lock()
        self.events: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = None
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.events.put({"method": "_closed"})
                for waiting in list(self._replies.values()):
                    waiting.put({"error": {"message": "the browser closed its DevTools pipe"}})
                return
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message and message["id"] in self._replies:
                    self._replies[message["id"]].put(message)
                elif "method" in message:
                    self.events.put(message)

    def send(self, method: str, timeout: float = 30.0, **params):
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            self._replies[ident] = queue.Queue()
        message = {"id": ident, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        try:
            reply = self._replies[ident].get(timeout=timeout)
        except queue.Empty:
            raise BrowserError(f"Chromium did not answer {method} within {timeout:.0f} s") from None
        finally:
            self._replies.pop(ident, None)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    def wait_for(self, method: str, timeout: float, seen: list) -> None:
        """Drain events into `seen` until `method` arrives (raises after `timeout` s)."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no {method} within {timeout:.0f} s")
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if event["method"] == "_closed":
                raise BrowserError("the browser exited: " + self._stderr_tail())
            seen.append(event)
            if event["method"] == method:
                return

    def drain(self, seen: list, quiet: float) -> None:
        """Collect events until none arrives for `quiet` seconds."""
        while True:
            try:
                seen.append(self.events.get(timeout=quiet))
            except queue.Empty:
                return

    def _stderr_tail(self) -> str:
        try:
            self._process.wait(timeout=2)
            return (self._process.stderr.read() or b"").decode(errors="replace")[-800:]
        except subprocess.TimeoutExpired:
            return "(still running)"

    def close(self) -> None:
        try:
            os.close(self._to_browser)  # Chromium exits when its command pipe closes
            self._process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait()
        finally:
            self._process.stderr.close()
            os.close(self._from_browser)
            self._profile.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
