"""Serving an ASGI app with uvicorn on a socket bound first (so port 0 picks a free port that is
known before the first request): in a daemon thread (:class:`AppThread`, for tests and
in-process harnesses) or in the foreground (:func:`serve_forever`). The OpenAI-compatible server
and the Tinker-compatible server both run this way."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from skyrl_gym.errors import require

__all__ = ["AppThread", "bind_socket", "origin", "serve_forever"]


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv6 when ``host`` has a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def origin(host: str, port: int) -> str:
    """``http://host:port`` (an IPv6 host in brackets)."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _uvicorn_server(app: Any, log_level: str, extra: str, what: str) -> Any:
    uvicorn: Any = require("uvicorn", extra, what)
    return uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="off", access_log=False))


class AppThread:
    """``app`` served on ``host:port`` in a daemon thread; a context manager. Subclasses build the
    app and may release their own resources in :meth:`_close`."""

    #: Named in thread names and errors; the ``pip install`` extra that brings uvicorn.
    label = "server"
    extra = "serve"

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout_s: float = 30.0,
        log_level: str = "warning",
    ) -> None:
        self.app = app
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self._sock = bind_socket(host, port)
        self.port: int = self._sock.getsockname()[1]
        self._server = _uvicorn_server(app, log_level, self.extra, f"the {self.label}")
        self._thread: threading.Thread | None = None

    @property
    def origin(self) -> str:
        """``http://host:port``."""
        return origin(self.host, self.port)

    def start(self) -> AppThread:
        """Start serving; returns once the server accepts requests (or raises after the deadline)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])),
            name=f"skyrl-{self.label.replace(' ', '-')}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the {self.label} thread ended during startup (see the log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the {self.label} did not start within {self.startup_timeout_s}s")
            time.sleep(0.01)
        return self

    def _close(self) -> None:
        """Release what the subclass holds (called by :meth:`stop` after the server stopped)."""

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving, release the subclass's resources and close the socket. Idempotent."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self._close()
        self._sock.close()

    def __enter__(self) -> AppThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_forever(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str,
    banner: Callable[[str], str],
    extra: str = "serve",
    what: str = "the server",
) -> None:
    """Serve ``app`` in the foreground until interrupted (Ctrl-C or SIGTERM). Once the socket is
    bound, prints ``banner(origin)`` (flushed), so a caller that passed port 0 learns the port."""
    sock = bind_socket(host, port)
    print(banner(origin(host, sock.getsockname()[1])), flush=True)
    server = _uvicorn_server(app, log_level, extra, what)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        sys.stdout.flush()
