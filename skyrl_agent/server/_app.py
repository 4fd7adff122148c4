"""The FastAPI application: ``/v1/models``, the generation endpoints (see ``_handlers``) and
the session endpoints. Built by :func:`build_app`; needs the ``serve`` extra."""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations, and
# `fastapi.Request` is only a local name inside build_app (the import is lazy).

from typing import Any

from skyrl_agent.server._core import Core
from skyrl_agent.server._handlers import chat as _chat
from skyrl_agent.server._handlers import complete as _complete
from skyrl_agent.server._protocol import ApiError, ChatRequest, CompletionRequest
from skyrl_agent.server.sessions import SessionStore
from skyrl_agent.server.types import CallRecord, ServerConfig
from skyrl_agent.types import Policy
from skyrl_gym.errors import require

__all__ = ["build_app", "SESSION_HEADER"]

#: The request header that names a session (else the ``user`` field, else the default session).
SESSION_HEADER = "X-Session-ID"


# --------------------------------------------------------------------------- app
def _session_body(session_id: str, calls: list[CallRecord]) -> dict[str, Any]:
    from skyrl_agent.server.sessions import calls_to_trajectories

    return {
        "id": session_id,
        "calls": [c.to_dict() for c in calls],
        "trajectories": [t.to_dict() for t in calls_to_trajectories(calls, session_id=session_id)],
    }


def build_app(policy: Policy, config: ServerConfig | None = None, store: SessionStore | None = None) -> Any:
    """The FastAPI app serving ``policy`` (``serve`` extra). Calls are recorded in ``store``
    (a new :class:`SessionStore` when None; reachable as ``app.state.store``)."""
    fastapi: Any = require("fastapi", "serve", "the OpenAI-compatible server")
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    config = config or ServerConfig()
    store = store if store is not None else SessionStore(config.max_sessions, config.max_calls_per_session)
    core = Core(policy, config, store)
    app = fastapi.FastAPI(title="skyrl OpenAI-compatible server", version="1")
    app.state.store = store
    app.state.config = config

    @app.exception_handler(ApiError)
    async def _api_error(request: Any, exc: ApiError) -> Any:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Any, exc: RequestValidationError) -> Any:
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        msg = (
            f"{where}: {first.get('msg', 'invalid request')}"
            if where
            else str(first.get("msg", "invalid request"))
        )
        return JSONResponse(ApiError(400, msg, param=where or None).body(), status_code=400)

    if config.api_key:
        expected = f"Bearer {config.api_key}"

        @app.middleware("http")
        async def _auth(request: fastapi.Request, call_next: Any) -> Any:
            if request.url.path.startswith("/v1") and request.headers.get("authorization") != expected:
                error = ApiError(
                    401, "a wrong or missing API key", type="authentication_error", code="invalid_api_key"
                )
                return JSONResponse(error.body(), status_code=401)
            return await call_next(request)

    def respond(body: dict[str, Any], stream: Any, session: str) -> Any:
        headers = {SESSION_HEADER: session}
        if stream is not None:
            return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
        return JSONResponse(body, headers=headers)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        entry = {"id": config.model_name, "object": "model", "created": 0, "owned_by": "skyrl"}
        return {"object": "list", "data": [{**entry, "max_model_len": config.max_model_len}]}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: fastapi.Request) -> Any:
        header = request.headers.get(SESSION_HEADER)
        body, stream = await _chat(core, req, header)
        return respond(body, stream, core.session_of(header, req.user))

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: fastapi.Request) -> Any:
        header = request.headers.get(SESSION_HEADER)
        body, stream = await _complete(core, req, header)
        return respond(body, stream, core.session_of(header, req.user))

    @app.get("/v1/sessions")
    async def sessions() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": k, "calls": n} for k, n in store.ids().items()]}

    @app.get("/v1/sessions/{session_id}")
    async def get_session(session_id: str) -> Any:
        calls = store.get(session_id)
        if calls is None:
            raise ApiError(404, f"no session {session_id!r}", param="session_id", code="session_not_found")
        return _session_body(session_id, calls)

    @app.delete("/v1/sessions/{session_id}")
    async def pop_session(session_id: str) -> Any:
        calls = store.pop(session_id)
        if calls is None:
            raise ApiError(404, f"no session {session_id!r}", param="session_id", code="session_not_found")
        return _session_body(session_id, calls)

    @app.delete("/v1/sessions")
    async def clear_sessions() -> dict[str, int]:
        return {"deleted": store.clear()}

    return app
