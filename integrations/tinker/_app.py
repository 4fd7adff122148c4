"""The FastAPI application: every ``/api/v1`` route the official ``tinker`` client (0.38) calls.

Routes answer JSON, except two results of ``retrieve_future`` (``ForwardBackwardOutput`` and
``SampleResponse``, protobuf) and the ``forward_backward`` request body (protobuf, maybe zstd).
Every JSON body is validated by its model in :mod:`integrations.tinker._requests`, which
``/openapi.json`` shows.

Every answer is a success or an error in Tinker's shape, ``{"error": ..., "category": ...}``:

- a malformed request (a body that fails its schema, a broken protobuf) gets HTTP 400 whose
  message names the field and what it must be; a body larger than ``max_request_bytes`` 413;
- a well-formed request that cannot be served (an unknown base model, an unsupported loss, a
  missing checkpoint) fails its future: ``retrieve_future`` answers the error with HTTP 200, which
  the client raises as ``tinker.RequestFailedError``; a synchronous route answers it with its
  4xx status (404 unknown ids, 409 not ready, 410 closed session);
- anything not served here gets a 404 (405 for a known path with the wrong method);
- a bug in the server gets a 500 in the same shape (category ``server``) and is logged; it
  never escapes as a plain-text 500.

The OpenAPI document lists each route's request body and exactly these status codes.
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations.

import datetime
import json
import logging
from typing import Any, Literal

from integrations.tinker._auth import INVALID_TOKEN_HEADER, key_user, looks_like_jwt
from integrations.tinker._oai import PREFIX as OAI_PREFIX
from integrations.tinker._requests import (
    CheckpointTtlBody,
    CreateModelBody,
    CreateSamplingSessionBody,
    CreateSessionBody,
    ErrorBody,
    FinishBody,
    LoadWeightsBody,
    ModelIdBody,
    OptimStepBody,
    RequestIdBody,
    SampleBody,
    SaveWeightsBody,
    SaveWeightsForSamplerBody,
    SdkVersionBody,
    SessionBody,
    TelemetryBody,
    WeightsInfoBody,
    validation_message,
)
from integrations.tinker._wire import decode_body, parse_forward_backward
from integrations.tinker.state import ServerState
from integrations.tinker.types import ErrorCategory, TinkerRequestError
from skyrl_gym.errors import require

__all__ = ["build_app", "CLIENT_CONFIG"]

log = logging.getLogger(__name__)

#: The feature flags sent to the client (``/client/config``): plain HTTP transport, JWT exchange
#: as the server's ``jwt_auth`` says, uncompressed fwd/bwd bodies (zstd is accepted too),
#: per-request future polling.
CLIENT_CONFIG: dict[str, Any] = {
    "pjwt_auth_enabled": False,
    "use_pyqwest_transport": False,
    "proto_compress_fwdbwd": False,
    "parallel_fwdbwd_chunks": True,
    "sample_use_retrieve_futures": False,
    "sample_join_sampling_session": False,
    "custom_loss_server_side": False,
}

_STATUS_TEXT = {
    400: "The request is malformed: the message names the field and what it must be.",
    401: "A key the server does not accept (with --api-key), or a token it did not issue or that expired.",
    404: "An unknown (or closed) session, model, sampler or checkpoint.",
    409: "The model is still being created.",
    410: "The session is closed.",
    413: "The request body is larger than the server's max_request_bytes.",
}
_PROTOBUF = {"schema": {"type": "string", "format": "binary"}}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` entry documenting error statuses ``codes`` (400 and 413 always)."""
    return {c: {"model": ErrorBody, "description": _STATUS_TEXT[c]} for c in sorted({400, 413, *codes})}


class _BodyTooLarge(Exception):
    pass


_TOO_LARGE = "skyrl.tinker.body_too_large"


class _BodyLimit:
    """ASGI middleware: a request body larger than ``limit`` bytes gets a 413 (at once when its
    ``Content-Length`` says so, else when reading it passes the limit)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await _send_json(send, 413, _too_large(self.limit))
            return
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            message = await receive()
            if message.get("type") == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    scope[_TOO_LARGE] = True  # FastAPI turns the error into a 400; the handler looks here
                    raise _BodyTooLarge
            return message

        await self.app(scope, limited, send)


def _too_large(limit: int) -> dict[str, str]:
    return {
        "error": f"the request body is larger than this server's max_request_bytes ({limit}); send less per request",
        "category": "user",
    }


async def _send_json(send: Any, status: int, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


def build_app(state: ServerState) -> Any:
    """The FastAPI app over ``state`` (``tinker`` extra); ``app.state.tinker`` is ``state``."""
    fastapi: Any = require("fastapi", "tinker", "the Tinker-compatible server")
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    app = fastapi.FastAPI(title="skyrl Tinker-compatible server", version="1")
    app.state.tinker = state
    config = state.config

    def error(message: str, status: int, category: ErrorCategory = ErrorCategory.USER) -> Any:
        return JSONResponse({"error": message, "category": category.value}, status_code=status)

    @app.exception_handler(TinkerRequestError)
    async def _request_error(request: Any, exc: TinkerRequestError) -> Any:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(request: Any, exc: Any) -> Any:
        route = request.url.path.removeprefix("/api/v1/")
        return error(validation_message(route, exc.errors()), 400)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Any, exc: Any) -> Any:
        if request.scope.get(_TOO_LARGE):
            return JSONResponse(_too_large(config.max_request_bytes), status_code=413)
        if exc.status_code == 404:
            message = f"{request.method} {request.url.path} is not supported by this Tinker-compatible server"
        elif exc.status_code == 405:
            message = (
                f"{request.method} is not allowed on {request.url.path}; see /openapi.json for its method"
            )
        else:
            message = f"{request.method} {request.url.path}: {exc.detail}"
        return error(message, exc.status_code)

    keys = frozenset(config.api_keys)
    tokens = state.tokens
    key_users = frozenset(key_user(k, True) for k in keys)

    def token_refused(sent: str) -> str | None:
        """Why the JWT ``sent`` is refused, or None when it may pass."""
        if tokens is None:
            return "this server does not issue tokens (JWT auth is off): send an API key"
        claims, why = tokens.check(sent)
        if claims is None:
            return why
        if keys and claims.get("sub") not in key_users:
            return "the key this token was issued for is no longer accepted"
        return None

    @app.middleware("http")
    async def _record(request: fastapi.Request, call_next: Any) -> Any:
        try:
            sent = request.headers.get("x-api-key") or _bearer(request.headers.get("authorization"))
            open_route = request.url.path == "/api/v1/healthz"
            if not open_route and looks_like_jwt(sent) and (why := token_refused(sent)) is not None:
                response = error(
                    f"a token this server cannot accept: {why}; trade the API key for a new one", 401
                )
                response.headers[INVALID_TOKEN_HEADER] = (
                    f'Bearer error="invalid_token", error_description="{why}"'
                )
            elif keys and sent not in keys and not open_route and not looks_like_jwt(sent):
                response = error(
                    "this server accepts only its configured API keys; "
                    + (
                        "no X-API-Key header was sent"
                        if sent is None
                        else "the X-API-Key sent is not one of them"
                    ),
                    401,
                )
            else:
                response = await call_next(request)
        except Exception as exc:  # noqa: BLE001 - a bug: logged, and answered in Tinker's shape
            if request.scope.get(_TOO_LARGE):  # raised while reading the body (maybe in a group)
                response = JSONResponse(_too_large(config.max_request_bytes), status_code=413)
            else:
                log.exception("%s %s failed", request.method, request.url.path)
                response = error(
                    f"{request.method} {request.url.path} failed on the server ({type(exc).__name__}); "
                    "this is a bug in the server, its log has the details",
                    500,
                    ErrorCategory.SERVER,
                )
        route = request.scope.get("route")
        state.requests.append(
            (request.method, getattr(route, "path", request.url.path), response.status_code)
        )
        return response

    _session_routes(app, state, error)
    _training_routes(app, state, fastapi)
    _run_routes(app, state, fastapi)
    _sampling_routes(app, state)
    _future_routes(app, state)
    _openai_routes(app, state, fastapi)
    _document_errors_as_400(app)
    app.add_middleware(_BodyLimit, limit=config.max_request_bytes)  # outermost: before any body is read
    return app


def _bearer(header: str | None) -> str | None:
    """The key of an ``Authorization: Bearer KEY`` header (how OpenAI clients send it)."""
    if header is None:
        return None
    scheme, _, key = header.partition(" ")
    return key.strip() or None if scheme.lower() == "bearer" else None


def _openai_routes(app: Any, state: ServerState, fastapi: Any) -> None:
    """The OpenAI-compatible surface (``/oai/api/v1``; :mod:`integrations.tinker._oai`)."""
    from starlette.responses import Response

    surface = state.openai

    class _Answer(Response):  # the sub-app answers on the raw connection, streamed or not
        def __init__(self, route: str, body: bytes) -> None:
            super().__init__()
            self.route, self.request_body = route, body

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await surface.answer(self.route, self.request_body, scope, receive, send)

    @app.get(f"{OAI_PREFIX}/models")
    async def oai_models() -> Any:
        return surface.models_body()

    @app.post(f"{OAI_PREFIX}/{{route:path}}", include_in_schema=False)
    async def oai(route: str, request: fastapi.Request) -> Any:
        return _Answer(route, await request.body())


def _future(rid: str, **extra: Any) -> dict[str, Any]:
    """The reply that hands the client a future to poll (``retrieve_future``)."""
    return {"request_id": rid, **extra}


def _session_routes(app: Any, state: ServerState, error: Any) -> None:
    """Health, client config, sessions, telemetry and capabilities."""
    config = state.config

    @app.get("/api/v1/healthz")
    async def healthz() -> Any:
        return {"status": "ok"}

    @app.post("/api/v1/client/config", responses=_errors())
    async def client_config(body: SdkVersionBody | None = None) -> Any:
        return {**CLIENT_CONFIG, "pjwt_auth_enabled": config.jwt_auth, **dict(config.client_flags)}

    from fastapi import Header

    @app.post("/api/v1/auth/token", responses=_errors(401, 404))
    async def auth_token(
        body: SdkVersionBody | None = None,
        x_api_key: str | None = Header(None),
        authorization: str | None = Header(None),
    ) -> Any:
        """Trade the API key (checked by the middleware when keys are configured) for a token."""
        if state.tokens is None:
            return error("JWT auth is off on this server (--no-jwt): send the API key itself", 404)
        sent = x_api_key or _bearer(authorization)
        if looks_like_jwt(sent):  # a token passed the middleware: renew it for its own user
            claims, _ = state.tokens.check(sent)
            user = str((claims or {}).get("sub"))
        else:
            user = key_user(sent, bool(config.api_keys))
        return {"jwt": state.tokens.mint(user)}

    @app.post("/api/v1/client/dynamic_config", responses=_errors())
    async def dynamic_config(body: SdkVersionBody | None = None) -> Any:
        return {
            "refresh_interval_sec": 300,
            "sample_cancel_enabled": True,  # the client cancels the sampling requests it abandons
            "sample_cancel_max_batch_size": 64,
        }

    @app.post("/api/v1/create_session", responses=_errors())
    async def create_session(body: CreateSessionBody) -> Any:
        session = state.create_session(body.sdk_version, body.tags, body.user_metadata, body.display_name)
        return {"type": "create_session", "session_id": session.session_id}

    @app.post("/api/v1/session_heartbeat", responses=_errors(410))
    async def heartbeat(body: SessionBody) -> Any:
        sid = body.session_id
        if sid not in state.sessions or state.sessions[sid].finished:
            return error(f"session {sid!r} is closed; create a new ServiceClient", 410)
        state.session(sid)
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish", responses=_errors())
    async def finish(session_id: str, body: FinishBody | None = None) -> Any:
        state.finish_session(session_id)
        return {"status": "finished"}

    @app.post("/api/v1/telemetry", responses=_errors())
    async def telemetry(body: TelemetryBody | None = None) -> Any:
        return {"status": "accepted"}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities() -> Any:
        names = ["smollm2-135m", "tiny-random", *(a for a, _ in config.model_aliases)]
        return {"supported_models": [{"model_name": n, "trainable": True, "sampleable": True} for n in names]}


def _training_routes(app: Any, state: ServerState, fastapi: Any) -> None:
    """Training clients: create a model, forward/backward, optimizer steps, weights."""
    config = state.config

    @app.post("/api/v1/create_model", responses=_errors())
    async def create_model(body: CreateModelBody) -> Any:
        try:
            rid = state.submit_create_model(body)
        except TinkerRequestError as exc:  # reported through the future: RequestFailedError
            rid = state.futures.failed("create_model", exc)
        return _future(rid, model_id=f"{body.session_id}:train:{body.model_seq_id}")

    @app.post("/api/v1/get_info", responses=_errors(404, 409))
    async def get_info(body: ModelIdBody) -> Any:
        return state.info(body.model_id)

    @app.post(
        "/api/v1/forward_backward",
        responses=_errors(),
        openapi_extra={
            "requestBody": {
                "required": True,
                "description": "a tinker ForwardBackwardRequest protobuf (Content-Encoding: zstd allowed)",
                "content": {"application/x-protobuf": _PROTOBUF},
            }
        },
    )
    async def forward_backward(request: fastapi.Request) -> Any:
        if "json" in request.headers.get("content-type", ""):
            raise TinkerRequestError(
                "forward_backward takes a protobuf body (tinker >= 0.25); upgrade the tinker client"
            )
        raw = decode_body(
            await request.body(), request.headers.get("content-encoding"), config.max_request_bytes
        )
        if not raw:
            raise TinkerRequestError(
                "forward_backward needs a body: a ForwardBackwardRequest protobuf (Content-Type: "
                "application/x-protobuf), as the tinker client sends"
            )
        req = parse_forward_backward(raw, config.max_request_bytes)
        return _future(state.submit_forward_backward(req), model_id=req.model_id)

    @app.post("/api/v1/forward", responses=_errors())
    async def forward_json() -> Any:
        raise TinkerRequestError(
            "the JSON /forward route of tinker < 0.25 is not supported; upgrade the tinker client "
            "(forward passes go to /forward_backward with forward_only)"
        )

    @app.post("/api/v1/optim_step", responses=_errors())
    async def optim_step(body: OptimStepBody) -> Any:
        return _future(state.submit_optim_step(body), model_id=body.model_id)

    @app.post("/api/v1/save_weights", responses=_errors())
    async def save_weights(body: SaveWeightsBody) -> Any:
        return _future(state.submit_save_state(body), model_id=body.model_id)

    @app.post("/api/v1/save_weights_for_sampler", responses=_errors())
    async def save_weights_for_sampler(body: SaveWeightsForSamplerBody) -> Any:
        return _future(state.submit_save_for_sampler(body), model_id=body.model_id)

    @app.post("/api/v1/load_weights", responses=_errors())
    async def load_weights(body: LoadWeightsBody) -> Any:
        return _future(state.submit_load_weights(body))

    @app.post("/api/v1/unload_model", responses=_errors(404))
    async def unload_model(body: ModelIdBody) -> Any:
        model_id = body.model_id
        state.unload_model(model_id)
        rid = state.futures.new("unload_model")
        state.futures.finish(rid, {"model_id": model_id, "type": "unload_model"})
        return _future(rid, model_id=model_id)


def _run_routes(app: Any, state: ServerState, fastapi: Any) -> None:
    """What the client's ``RestClient`` reads: training runs and their checkpoints."""
    query = fastapi.Query

    @app.get("/api/v1/training_runs", responses=_errors())
    async def training_runs(
        limit: int = query(20, ge=1, le=1000),
        offset: int = query(0, ge=0),
        access_scope: Literal["owned", "accessible"] = "owned",
        project_id: str | None = query(None, max_length=256),
    ) -> Any:
        return state.training_runs(limit, offset)  # one owner here: both scopes are every run

    @app.get("/api/v1/training_runs/{model_id}", responses=_errors(404))
    async def training_run(model_id: str, access_scope: Literal["owned", "accessible"] = "owned") -> Any:
        return state.training_run(model_id)

    @app.get("/api/v1/training_runs/{model_id}/checkpoints", responses=_errors(404))
    async def run_checkpoints(model_id: str) -> Any:
        return state.checkpoints(model_id)

    @app.get("/api/v1/sessions", responses=_errors())
    async def list_sessions(
        limit: int = query(20, ge=1, le=1000),
        offset: int = query(0, ge=0),
        access_scope: Literal["owned", "accessible"] = "owned",
    ) -> Any:
        return state.list_sessions(limit, offset)  # one owner here: both scopes are every session

    @app.get("/api/v1/sessions/{session_id}", responses=_errors(404))
    async def get_session(session_id: str, access_scope: Literal["owned", "accessible"] = "owned") -> Any:
        return state.session_info(session_id)

    @app.get("/api/v1/audit", responses=_errors())
    async def audit(
        event_type: Literal["all", "checkpoints", "projects", "teams", "organizations"] = "all",
        day: str | None = query(None, pattern=r"^\d{4}-\d{2}-\d{2}$", description="a UTC day, YYYY-MM-DD"),
    ) -> Any:
        try:
            when = datetime.date.fromisoformat(day) if day is not None else None
        except ValueError:
            raise TinkerRequestError(f"day must be a date as YYYY-MM-DD, got {day!r}") from None
        return state.audit(event_type, when)

    @app.get("/api/v1/checkpoints", responses=_errors())
    async def all_checkpoints(limit: int = query(100, ge=1, le=10_000), offset: int = query(0, ge=0)) -> Any:
        return state.checkpoints(None, limit, offset)

    @app.delete("/api/v1/training_runs/{model_id}/checkpoints/{checkpoint_id:path}", responses=_errors(404))
    async def delete_checkpoint(model_id: str, checkpoint_id: str) -> Any:
        state.delete_checkpoint(model_id, checkpoint_id)
        return None

    @app.put("/api/v1/training_runs/{model_id}/checkpoints/{checkpoint_id:path}/ttl", responses=_errors(404))
    async def checkpoint_ttl(model_id: str, checkpoint_id: str, body: CheckpointTtlBody) -> Any:
        state.set_checkpoint_ttl(model_id, checkpoint_id, body.ttl_seconds)
        return None

    @app.post("/api/v1/weights_info", responses=_errors(404))
    async def weights_info(body: WeightsInfoBody) -> Any:
        return state.weights_info(body.tinker_path)


def _sampling_routes(app: Any, state: ServerState) -> None:
    """Sampling sessions and sampling requests."""

    @app.post("/api/v1/create_sampling_session", responses=_errors(404))
    async def create_sampling_session(body: CreateSamplingSessionBody) -> Any:
        sid = state.create_sampling_session(body)
        return {"type": "create_sampling_session", "sampling_session_id": sid}

    @app.get("/api/v1/samplers/{sampler_id}", responses=_errors(404))
    async def get_sampler(sampler_id: str) -> Any:
        found = state.sampling_session(sampler_id)
        return {
            "sampler_id": sampler_id,
            "base_model": found.snapshot.base_name,
            "model_path": found.snapshot.model_path,
        }

    @app.post("/api/v1/asample", responses=_errors())
    async def asample(body: SampleBody) -> Any:
        state.check_num_samples(body)  # a 400 before one sequence id per sample is made
        try:
            rid, ids = state.submit_sample(body)
        except TinkerRequestError as exc:  # reported through the future, like the real service
            rid = state.futures.failed("sample", exc)
            ids = [f"{rid}:{i}" for i in range(body.num_samples)]
        return _future(rid, sample_sequence_ids=ids)


def _future_routes(app: Any, state: ServerState) -> None:
    """Polling and cancelling futures."""
    from fastapi.responses import JSONResponse, Response

    config = state.config

    @app.post(
        "/api/v1/retrieve_future",
        responses={
            200: {
                "description": "the result (JSON, or protobuf for forward_backward and sample results), "
                '{"type": "try_again"} while pending, or the failed request\'s error',
                "content": {"application/x-protobuf": _PROTOBUF},
            },
            **_errors(),
        },
    )
    async def retrieve_future(body: RequestIdBody) -> Any:
        rid = body.request_id
        state.scheduler.skip_stale_gaps()
        try:
            entry = await state.futures.wait(rid, config.long_poll_s)
        except TinkerRequestError as exc:
            return JSONResponse(exc.body())
        if entry is None:
            return {"type": "try_again", "request_id": rid, "queue_state": "active"}
        if entry.error is not None:
            return JSONResponse(entry.error.body())
        if isinstance(entry.result, bytes):
            return Response(entry.result, media_type="application/x-protobuf")
        return entry.result

    @app.post("/api/v1/cancel_future", responses=_errors())
    async def cancel_future(body: RequestIdBody) -> Any:
        """Stop a request's job (idempotent: an unknown or finished request has nothing to stop)."""
        known = state.futures.cancel(body.request_id)
        return {"request_id": body.request_id, "status": "cancel_requested" if known else "unknown"}


def _document_errors_as_400(app: Any) -> None:
    """Make ``/openapi.json`` say what the server answers: invalid bodies get 400 in Tinker's
    error shape (FastAPI documents 422 with its own shape, which this server never sends)."""
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            for item in schema.get("paths", {}).values():
                for operation in item.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
