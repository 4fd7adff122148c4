"""Drive headless Chromium over the DevTools protocol on a pipe (``--remote-debugging-pipe``).

No client library: Chromium reads commands from its fd 3 and writes replies and events to its
fd 4, each message JSON ended by a NUL byte. Enough to open pages and evaluate JavaScript in them,
which is what the docs site's browser test needs.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import tempfile
import time
from typing import Any


class Browser:
    """One headless Chromium with one page; use as a context manager (the process and its
    profile directory are removed on exit)."""

    def __init__(self, chromium: str, timeout: float = 60.0):
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="skyrl-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # copies at 10 or above, so the dup2 calls below never overwrite each other's source
        keep_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
        keep_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)

        self.proc = subprocess.Popen(
            [
                "bash",  # puts the pipe's ends at fd 3 and 4, where Chromium looks for them
                "-c",
                f'exec "$0" "$@" 3<&{keep_r} 4>&{keep_w} {keep_r}<&- {keep_w}>&-',
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile.name}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(keep_r, keep_w),
            start_new_session=True,
        )
        for fd in (to_chrome_r, from_chrome_w, keep_r, keep_w):
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self._events: list[str] = []
        target = next(t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self._session = self.send("Target.attachToTarget", targetId=target["targetId"], flatten=True)[
            "sessionId"
        ]
        self.send("Page.enable", session=True)

    def send(self, method: str, session: bool = False, **params: Any) -> dict:
        """Send one command (to the page's session when ``session``) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if "method" in reply:
                self._events.append(reply["method"])
            elif reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError(f"Chromium did not answer within {self.timeout:.0f}s")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium exited (code {self.proc.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.send(
            "Runtime.evaluate", session=True, expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Load ``url`` and wait until its document has finished loading."""
        self._events.clear()
        self.send("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + self.timeout
        while "Page.loadEventFired" not in self._events:
            message = self._read(deadline)
            if "method" in message:
                self._events.append(message["method"])

    def wait_for(self, condition: str, timeout: float | None = None) -> Any:
        """Poll a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            value = self.evaluate(condition)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"{condition!r} stayed false for {timeout or self.timeout:.0f}s")

    def close(self) -> None:
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
        self.proc.wait(10)
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
