"""Running the server: in a background thread (tests, in-process harnesses) or in the foreground
(``skyrl serve``). Both bind the socket first, so port 0 picks a free port that is known before
the first request."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from typing import Any

from skyrl_agent.server.sessions import SessionStore
from skyrl_agent.server.types import ServerConfig
from skyrl_agent.types import Policy
from skyrl_gym.errors import require

__all__ = ["ServerThread", "run_server"]


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _uvicorn_server(app: Any, log_level: str) -> Any:
    uvicorn: Any = require("uvicorn", "serve", "the OpenAI-compatible server")
    return uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="off", access_log=False))


class ServerThread:
    """The server on ``host:port`` in a daemon thread; a context manager.

    ::

        with ServerThread(policy, ServerConfig(model_name="m")) as server:
            client = openai.OpenAI(base_url=server.url, api_key="none")
            ...
            trajectories = server.store.trajectories("my-session")
    """

    def __init__(
        self,
        policy: Policy,
        config: ServerConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        store: SessionStore | None = None,
        startup_timeout_s: float = 30.0,
        log_level: str = "warning",
    ) -> None:
        from skyrl_agent.server._app import build_app

        self.config = config or ServerConfig()
        self.store = (
            store
            if store is not None
            else SessionStore(self.config.max_sessions, self.config.max_calls_per_session)
        )
        self.app = build_app(policy, self.config, self.store)
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self._sock = _bind(host, port)
        self.port: int = self._sock.getsockname()[1]
        self._server = _uvicorn_server(self.app, log_level)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL clients take (``http://host:port/v1``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def start(self) -> ServerThread:
        """Start serving; returns once the server accepts requests (or raises after the deadline)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])),
            name="skyrl-serve",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server thread ended during startup (see the log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the server did not start within {self.startup_timeout_s}s")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving and close the socket. Idempotent."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_server(
    policy: Policy,
    config: ServerConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
) -> None:
    """Serve in the foreground until interrupted (Ctrl-C or SIGTERM). Prints one line
    ``serving MODEL at http://HOST:PORT/v1`` (flushed) once the socket is bound."""
    from skyrl_agent.server._app import build_app

    config = config or ServerConfig()
    app = build_app(policy, config)
    sock = _bind(host, port)
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {config.model_name} at http://{shown}:{sock.getsockname()[1]}/v1", flush=True)
    server = _uvicorn_server(app, log_level)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        sys.stdout.flush()
