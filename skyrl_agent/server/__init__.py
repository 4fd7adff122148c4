"""An OpenAI-compatible server in front of any :class:`~skyrl_agent.types.Policy` that records,
per session, the token ids and logprobs of every call, so an external agent (any OpenAI- or
LiteLLM-client harness, Harbor agents) produces trainable trajectories.

::

    from skyrl_agent.server import ServerThread, ServerConfig

    with ServerThread(policy, ServerConfig(model_name="m")) as server:
        run_my_agent(base_url=server.url, model="m", session="ep-1")   # X-Session-ID: ep-1
        [trajectory] = server.store.trajectories("ep-1", reward=1.0)

or from a shell: ``skyrl serve --model M --host H --port P``, then ``GET /v1/sessions/ep-1``
(calls and trajectories as JSON) or ``DELETE /v1/sessions/ep-1`` (the same, and forgets it).

Importing this package imports neither FastAPI nor torch; :func:`build_app`,
:class:`ServerThread` and :func:`run_server` need the ``serve`` extra.
"""

from __future__ import annotations

from typing import Any

from skyrl_agent.server.sessions import SessionStore, calls_to_trajectories
from skyrl_agent.server.types import CallRecord, ChoiceRecord, ServerConfig

__all__ = [
    "CallRecord",
    "ChoiceRecord",
    "ServerConfig",
    "ServerThread",
    "SessionStore",
    "build_app",
    "calls_to_trajectories",
    "run_server",
]


def __getattr__(name: str) -> Any:
    if name == "build_app":
        from skyrl_agent.server._app import build_app

        return build_app
    if name in ("ServerThread", "run_server"):
        from skyrl_agent.server import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
