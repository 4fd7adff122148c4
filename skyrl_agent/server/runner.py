"""Running the server: in a background thread (tests, in-process harnesses) or in the foreground
(``skyrl serve``). Both bind the socket first, so port 0 picks a free port that is known before
the first request."""

from __future__ import annotations

from skyrl_agent.server.asgi import AppThread, serve_forever
from skyrl_agent.server.sessions import SessionStore
from skyrl_agent.server.types import ServerConfig
from skyrl_agent.types import Policy

__all__ = ["ServerThread", "run_server"]


class ServerThread(AppThread):
    """The server on ``host:port`` in a daemon thread; a context manager.

    ::

        with ServerThread(policy, ServerConfig(model_name="m")) as server:
            client = openai.OpenAI(base_url=server.url, api_key="none")
            ...
            trajectories = server.store.trajectories("my-session")
    """

    label = "server"
    extra = "serve"

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
        super().__init__(
            build_app(policy, self.config, self.store),
            host=host,
            port=port,
            startup_timeout_s=startup_timeout_s,
            log_level=log_level,
        )

    def _close(self) -> None:
        self.app.state.core.close()

    @property
    def url(self) -> str:
        """The base URL clients take (``http://host:port/v1``)."""
        return f"{self.origin}/v1"

    def session_url(self, session_id: str) -> str:
        """A base URL whose calls are all recorded under ``session_id``
        (``http://host:port/s/<session_id>/v1``): one per trial, for a harness that sets
        nothing but its base URL."""
        from urllib.parse import quote

        return f"{self.origin}/s/{quote(session_id, safe='')}/v1"

    def __enter__(self) -> ServerThread:
        self.start()
        return self


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
    serve_forever(
        build_app(policy, config),
        host=host,
        port=port,
        log_level=log_level,
        banner=lambda url: f"serving {config.model_name} at {url}/v1",
        what="the OpenAI-compatible server",
    )
