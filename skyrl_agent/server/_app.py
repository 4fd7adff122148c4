"""The FastAPI application: ``/v1/models``, the generation endpoints (see ``_handlers``) and
the session endpoints. Built by :func:`build_app`; needs the ``serve`` extra.

Every answer is a success or OpenAI's ``{"error": {...}}`` JSON: a request the server cannot
take gets a 4xx whose message names the field and the fix (invalid fields 400, not FastAPI's
422; bodies over ``ServerConfig.max_request_bytes`` 413), a generation past its deadline 504,
and only a server bug 500 (logged). ``/openapi.json`` documents exactly these answers."""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations, and
# `fastapi.Request` is only a local name inside build_app (the import is lazy).

import reprlib
from typing import Any

from skyrl_agent.server._core import Core
from skyrl_agent.server._guard import RequestGuard, error_body, header_safe, render_json
from skyrl_agent.server._handlers import chat as _chat
from skyrl_agent.server._handlers import complete as _complete
from skyrl_agent.server._openapi import CHAT_RESPONSES, COMPLETION_RESPONSES, RESPONSES, finish_document
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


def _where(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a ``param``: ``messages[0].role`` (``body`` and the union
    branch tags that pydantic inserts, like ``list[str]``, left out)."""
    out = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out and ("[" in part or part in _BRANCH_TAGS):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


_SHORT = reprlib.Repr()  # a request value quoted in an error: short whatever its size
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlist = _SHORT.maxdict = 4
_SHORT.maxlevel = 2
_BRANCH_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "constrained-str", "constrained-int"}


def _validation_message(first: dict[str, Any], where: str) -> str:
    kind = first.get("type", "")
    msg = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    if kind == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return f"the request body is not valid JSON ({detail}); send a JSON object"
    if not where:
        return f"the request body must be a JSON object ({msg})"
    if kind == "missing":
        return f"{where} is required"
    got = _SHORT.repr(first.get("input"))
    return f"{msg} (got {got})" if msg.startswith(where) else f"{where}: {msg} (got {got})"


def build_app(policy: Policy, config: ServerConfig | None = None, store: SessionStore | None = None) -> Any:
    """The FastAPI app serving ``policy`` (``serve`` extra). Calls are recorded in ``store``
    (a new :class:`SessionStore` when None; reachable as ``app.state.store``)."""
    fastapi: Any = require("fastapi", "serve", "the OpenAI-compatible server")
    from fastapi.exceptions import RequestValidationError
    from fastapi.openapi.utils import get_openapi
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException

    class _JSON(JSONResponse):
        def render(self, content: Any) -> bytes:
            return render_json(content)

    def answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        return _JSON(body, status_code=status, headers=headers)

    config = config or ServerConfig()
    store = store if store is not None else SessionStore(config.max_sessions, config.max_calls_per_session)
    core = Core(policy, config, store)
    app = fastapi.FastAPI(title="skyrl OpenAI-compatible server", version="1", default_response_class=_JSON)
    app.state.store = store
    app.state.config = config
    app.state.core = core

    @app.exception_handler(ApiError)
    async def _api_error(request: Any, exc: ApiError) -> Any:
        return answer(exc.status, exc.body())

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Any, exc: RequestValidationError) -> Any:
        errors = exc.errors()
        # For a union field pydantic reports each branch; a broken constraint (too long, out of
        # range) says more than "not a string" from the branch the value was never meant for.
        specific = [e for e in errors if not str(e.get("type", "")).endswith("_type")]
        first = (specific or errors or [{}])[0]
        where = _where(tuple(first.get("loc", ())))
        return answer(400, ApiError(400, _validation_message(first, where), param=where or None).body())

    @app.exception_handler(HTTPException)
    async def _http_error(request: Any, exc: HTTPException) -> Any:
        # unknown routes (404), wrong methods (405), a body FastAPI could not parse (400)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        message = f"{exc.detail}: {request.method} {request.scope.get('path', '')}"
        if exc.status_code == 400:  # FastAPI's "There was an error parsing the body"
            cause = exc.__cause__
            why = f" ({type(cause).__name__}: {str(cause)[:200]})" if cause is not None else ""
            message = f"the request body could not be parsed{why}; send a valid JSON object"
        return answer(exc.status_code, error_body(message, type=kind), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _bug(request: Any, exc: Exception) -> Any:  # the last resort; RequestGuard comes first
        body = error_body(f"internal server error ({type(exc).__name__})", type="server_error")
        return answer(500, body)

    if config.api_key:
        expected = f"Bearer {config.api_key}"

        @app.middleware("http")
        async def _auth(request: fastapi.Request, call_next: Any) -> Any:
            path = request.scope.get("path", "")  # not request.url: a hostile Host header breaks it
            guarded = path.startswith(("/v1", "/s/"))
            if guarded and request.headers.get("authorization") != expected:
                error = ApiError(
                    401, "a wrong or missing API key", type="authentication_error", code="invalid_api_key"
                )
                return answer(401, error.body())
            return await call_next(request)

    app.add_middleware(
        RequestGuard, max_body_bytes=config.max_request_bytes, body_timeout_s=config.body_timeout_s
    )

    def respond(body: dict[str, Any], stream: Any, session: str) -> Any:
        headers = {SESSION_HEADER: header_safe(session)}
        if stream is not None:
            return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
        return answer(200, body, headers)

    @app.get("/health", responses=RESPONSES["health"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models", responses=RESPONSES["models"])
    async def models() -> dict[str, Any]:
        entry = {"id": config.model_name, "object": "model", "created": 0, "owned_by": "skyrl"}
        return {"object": "list", "data": [{**entry, "max_model_len": config.max_model_len}]}

    @app.post("/v1/chat/completions", responses=CHAT_RESPONSES)
    async def chat(req: ChatRequest, x_session_id: str | None = fastapi.Header(None)) -> Any:
        body, stream = await _chat(core, req, x_session_id)
        return respond(body, stream, core.session_of(x_session_id, req.user))

    @app.post("/v1/completions", responses=COMPLETION_RESPONSES)
    async def completions(req: CompletionRequest, x_session_id: str | None = fastapi.Header(None)) -> Any:
        body, stream = await _complete(core, req, x_session_id)
        return respond(body, stream, core.session_of(x_session_id, req.user))

    # One base URL per trial (``{origin}/s/{session}/v1``), for harnesses that can set a base URL
    # but no header or ``user`` (LiteLLM-based agents, Harbor's): the path names the session.
    session_path = fastapi.Path(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9._~:@-]+$")

    @app.post("/s/{session_id}/v1/chat/completions", responses=CHAT_RESPONSES)
    async def chat_in(req: ChatRequest, session_id: str = session_path) -> Any:
        body, stream = await _chat(core, req, session_id)
        return respond(body, stream, session_id)

    @app.post("/s/{session_id}/v1/completions", responses=COMPLETION_RESPONSES)
    async def completions_in(req: CompletionRequest, session_id: str = session_path) -> Any:
        body, stream = await _complete(core, req, session_id)
        return respond(body, stream, session_id)

    @app.get("/s/{session_id}/v1/models", responses=RESPONSES["models"])
    async def models_in(session_id: str = session_path) -> dict[str, Any]:
        return await models()

    @app.get("/v1/sessions", responses=RESPONSES["sessions"])
    async def sessions() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": k, "calls": n} for k, n in store.ids().items()]}

    @app.get("/v1/sessions/{session_id}", responses=RESPONSES["session"])
    async def get_session(session_id: str) -> Any:
        calls = store.get(session_id)
        if calls is None:
            raise ApiError(404, f"no session {session_id!r}", param="session_id", code="session_not_found")
        return await core.off_loop(_session_body, session_id, calls)

    @app.delete("/v1/sessions/{session_id}", responses=RESPONSES["session"])
    async def pop_session(session_id: str) -> Any:
        calls = store.pop(session_id)
        if calls is None:
            raise ApiError(404, f"no session {session_id!r}", param="session_id", code="session_not_found")
        return await core.off_loop(_session_body, session_id, calls)

    @app.delete("/v1/sessions", responses=RESPONSES["deleted"])
    async def clear_sessions() -> dict[str, int]:
        return {"deleted": store.clear()}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            app.openapi_schema = finish_document(
                schema, api_key=bool(config.api_key), model=config.model_name
            )
        return app.openapi_schema

    app.openapi = openapi
    return app
