"""Running the Tinker-compatible server: in a background thread (tests, notebooks) or in the
foreground (``skyrl tinker serve``). Both bind the socket first, so port 0 picks a free port that
is known before the first request.

::

    with TinkerServer(TinkerServerConfig(checkpoint_dir="ckpts")) as server:
        client = tinker.ServiceClient(base_url=server.url, api_key="tml-local")
        training = client.create_lora_training_client("tiny-random", rank=8)
"""

from __future__ import annotations

from integrations.tinker.state import ServerState
from integrations.tinker.types import TinkerServerConfig
from skyrl_agent.server.asgi import AppThread, serve_forever

__all__ = ["TinkerServer", "run_server"]


class TinkerServer(AppThread):
    """The server on ``host:port`` in a daemon thread; a context manager. ``url`` is the
    ``base_url`` for ``tinker.ServiceClient``."""

    label = "Tinker server"
    extra = "tinker"

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
        super().__init__(
            build_app(self.state),
            host=host,
            port=port,
            startup_timeout_s=startup_timeout_s,
            log_level=log_level,
        )

    @property
    def url(self) -> str:
        """The base URL clients take (``http://host:port``)."""
        return self.origin

    def _close(self) -> None:
        self.state.close()  # stops the model worker

    def __enter__(self) -> TinkerServer:
        self.start()
        return self


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
    try:
        serve_forever(
            build_app(state),
            host=host,
            port=port,
            log_level=log_level,
            banner=lambda url: f"tinker server at {url}",
            extra="tinker",
            what="the Tinker-compatible server",
        )
    finally:
        state.close()
