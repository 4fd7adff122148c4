"""Running the Tinker-compatible server: in a background thread (tests, notebooks) or in the
foreground (``skyrl tinker serve``). Both bind the socket first, so port 0 picks a free port that
is known before the first request.

::

    with TinkerServer(TinkerServerConfig(checkpoint_dir="ckpts")) as server:
        client = tinker.ServiceClient(base_url=server.url, api_key="tml-local")
        training = client.create_lora_training_client("tiny-random", rank=8)
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

from integrations.tinker.state import ServerState
from integrations.tinker.types import TinkerServerConfig
from skyrl_gym.errors import require

__all__ = ["TinkerServer", "run_server"]


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _uvicorn_server(app: Any, log_level: str) -> Any:
    uvicorn: Any = require("uvicorn", "tinker", "the Tinker-compatible server")
    return uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="off", access_log=False))


def _url(host: str, port: int) -> str:
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


class TinkerServer:
    """The server on ``host:port`` in a daemon thread; a context manager. ``url`` is the
    ``base_url`` for ``tinker.ServiceClient``."""

    def __init__(
        self,
        config: TinkerServerConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout_s: float = 30.0,
        log_level: str = "warning",
    ) -> None:
        from integrations.tinker._app import build_app

        self.config = config or TinkerServerConfig()
        self.state = ServerState(self.config)
        self.app = build_app(self.state)
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self._sock = _bind(host, port)
        self.port: int = self._sock.getsockname()[1]
        self._server = _uvicorn_server(self.app, log_level)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL clients take (``http://host:port``)."""
        return _url(self.host, self.port)

    def start(self) -> TinkerServer:
        """Start serving; returns once the server accepts requests (or raises after the deadline)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])),
            name="skyrl-tinker",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the Tinker server thread ended during startup (see the log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the Tinker server did not start within {self.startup_timeout_s}s")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving, stop the worker and close the socket. Idempotent."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self.state.close()
        self._sock.close()

    def __enter__(self) -> TinkerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_server(
    config: TinkerServerConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
) -> None:
    """Serve in the foreground until interrupted (Ctrl-C or SIGTERM). Prints one line
    ``tinker server at http://HOST:PORT`` (flushed) once the socket is bound."""
    from integrations.tinker._app import build_app

    state = ServerState(config or TinkerServerConfig())
    sock = _bind(host, port)
    print(f"tinker server at {_url(host, sock.getsockname()[1])}", flush=True)
    server = _uvicorn_server(build_app(state), log_level)
    try:
        server.run(sockets=[sock])
    finally:
        state.close()
        sock.close()
