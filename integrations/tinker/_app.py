"""The FastAPI application: every ``/api/v1`` route the official ``tinker`` client (0.38) calls.

Routes answer JSON, except two results of ``retrieve_future`` (``ForwardBackwardOutput`` and
``SampleResponse``, protobuf) and the ``forward_backward`` request body (protobuf, maybe zstd).
A failed request's future answers ``{"error": ..., "category": ...}`` with HTTP 200, which the
client raises as ``tinker.RequestFailedError``; a synchronous route answers the same body with a
4xx status. Anything else not served here gets a 404 in the same shape.
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations.

from typing import Any

from integrations.tinker._wire import decode_body, model_input_tokens, parse_forward_backward
from integrations.tinker.state import ServerState
from integrations.tinker.types import TinkerRequestError
from skyrl_gym.errors import require

__all__ = ["build_app", "CLIENT_CONFIG"]

#: The feature flags sent to the client (``/client/config``): plain HTTP transport, no JWT
#: exchange, uncompressed fwd/bwd bodies (zstd is accepted too), per-request future polling.
CLIENT_CONFIG: dict[str, Any] = {
    "pjwt_auth_enabled": False,
    "use_pyqwest_transport": False,
    "proto_compress_fwdbwd": False,
    "parallel_fwdbwd_chunks": True,
    "sample_use_retrieve_futures": False,
    "sample_join_sampling_session": False,
    "custom_loss_server_side": False,
}


def build_app(state: ServerState) -> Any:
    """The FastAPI app over ``state`` (``tinker`` extra); ``app.state.tinker`` is ``state``."""
    fastapi: Any = require("fastapi", "tinker", "the Tinker-compatible server")
    from fastapi.responses import JSONResponse, Response

    app = fastapi.FastAPI(title="skyrl Tinker-compatible server", version="1")
    app.state.tinker = state
    config = state.config

    @app.exception_handler(TinkerRequestError)
    async def _request_error(request: Any, exc: TinkerRequestError) -> Any:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(404)
    async def _not_found(request: Any, exc: Any) -> Any:
        message = f"{request.method} {request.url.path} is not supported by this Tinker-compatible server"
        return JSONResponse({"error": message, "category": "user"}, status_code=404)

    async def body_of(request: Any) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise TinkerRequestError("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise TinkerRequestError("the request body must be a JSON object")
        return body

    def future(rid: str, **extra: Any) -> dict[str, Any]:
        return {"request_id": rid, **extra}

    # ------------------------------------------------------------------ session
    @app.get("/api/v1/healthz")
    async def healthz() -> Any:
        return {"status": "ok"}

    @app.middleware("http")
    async def _record(request: fastapi.Request, call_next: Any) -> Any:
        response = await call_next(request)
        route = request.scope.get("route")
        state.requests.append(
            (request.method, getattr(route, "path", request.url.path), response.status_code)
        )
        return response

    @app.post("/api/v1/client/config")
    async def client_config(request: fastapi.Request) -> Any:
        return {**CLIENT_CONFIG, **dict(config.client_flags)}

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config(request: fastapi.Request) -> Any:
        return {
            "refresh_interval_sec": 300,
            "sample_cancel_enabled": False,
            "sample_cancel_max_batch_size": 64,
        }

    @app.post("/api/v1/create_session")
    async def create_session(request: fastapi.Request) -> Any:
        body = await body_of(request)
        session = state.create_session(str(body.get("sdk_version", "")), list(body.get("tags") or []))
        return {"type": "create_session", "session_id": session.session_id}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: fastapi.Request) -> Any:
        body = await body_of(request)
        sid = str(body.get("session_id", ""))
        if sid not in state.sessions or state.sessions[sid].finished:
            return JSONResponse({"error": f"session {sid!r} is closed", "category": "user"}, status_code=410)
        state.session(sid)
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish(session_id: str) -> Any:
        state.finish_session(session_id)
        return {"status": "finished"}

    @app.post("/api/v1/telemetry")
    async def telemetry(request: fastapi.Request) -> Any:
        return {"status": "accepted"}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities() -> Any:
        names = ["smollm2-135m", "tiny-random", *(a for a, _ in config.model_aliases)]
        return {"supported_models": [{"model_name": n, "trainable": True, "sampleable": True} for n in names]}

    # ------------------------------------------------------------------ training
    @app.post("/api/v1/create_model")
    async def create_model(request: fastapi.Request) -> Any:
        body = await body_of(request)
        try:
            rid = state.submit_create_model(body)
        except TinkerRequestError as exc:  # reported through the future: RequestFailedError
            rid = state.futures.failed("create_model", exc)
        return future(rid, model_id=f"{body.get('session_id')}:train:{body.get('model_seq_id')}")

    @app.post("/api/v1/get_info")
    async def get_info(request: fastapi.Request) -> Any:
        body = await body_of(request)
        return state.info(str(body.get("model_id", "")))

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: fastapi.Request) -> Any:
        raw = decode_body(
            await request.body(), request.headers.get("content-encoding"), config.max_request_bytes
        )
        if "json" in request.headers.get("content-type", ""):
            raise TinkerRequestError(
                "forward_backward takes a protobuf body (tinker >= 0.25); upgrade the tinker client"
            )
        req = parse_forward_backward(raw)
        return future(state.submit_forward_backward(req), model_id=req.model_id)

    @app.post("/api/v1/forward")
    async def forward_json(request: fastapi.Request) -> Any:
        raise TinkerRequestError(
            "the JSON /forward route of tinker < 0.25 is not supported; upgrade the tinker client "
            "(forward passes go to /forward_backward with forward_only)"
        )

    @app.post("/api/v1/optim_step")
    async def optim_step(request: fastapi.Request) -> Any:
        body = await body_of(request)
        return future(state.submit_optim_step(body), model_id=body.get("model_id"))

    @app.post("/api/v1/save_weights")
    async def save_weights(request: fastapi.Request) -> Any:
        body = await body_of(request)
        return future(state.submit_save_state(body), model_id=body.get("model_id"))

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_weights_for_sampler(request: fastapi.Request) -> Any:
        body = await body_of(request)
        return future(state.submit_save_for_sampler(body), model_id=body.get("model_id"))

    @app.post("/api/v1/load_weights")
    async def load_weights(request: fastapi.Request) -> Any:
        body = await body_of(request)
        return future(state.submit_load_weights(body))

    @app.post("/api/v1/unload_model")
    async def unload_model(request: fastapi.Request) -> Any:
        body = await body_of(request)
        model_id = str(body.get("model_id", ""))
        record = state.model(model_id)
        state.models.pop(model_id, None)
        state.scheduler.close_model(model_id)
        session = state.sessions.get(record.session_id)
        if session is not None and model_id in session.model_ids:
            session.model_ids.remove(model_id)
        rid = state.futures.new("unload_model")
        state.futures.finish(rid, {"model_id": model_id, "type": "unload_model"})
        return future(rid, model_id=model_id)

    # ------------------------------------------------------------------ sampling
    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: fastapi.Request) -> Any:
        body = await body_of(request)
        sid = state.create_sampling_session(body)
        return {"type": "create_sampling_session", "sampling_session_id": sid}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str) -> Any:
        found = state.sampling_session(sampler_id)
        return {
            "sampler_id": sampler_id,
            "base_model": found.snapshot.base_name,
            "model_path": found.snapshot.model_path,
        }

    @app.post("/api/v1/asample")
    async def asample(request: fastapi.Request) -> Any:
        body = await body_of(request)
        n = body.get("num_samples", 1)
        try:
            prompt = model_input_tokens(body.get("prompt"))
            rid, ids = state.submit_sample(body, prompt)
        except TinkerRequestError as exc:  # reported through the future, like the real service
            rid = state.futures.failed("sample", exc)
            ids = [f"{rid}:{i}" for i in range(n if isinstance(n, int) and n > 0 else 1)]
        return future(rid, sample_sequence_ids=ids)

    # ------------------------------------------------------------------ futures
    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: fastapi.Request) -> Any:
        body = await body_of(request)
        rid = str(body.get("request_id", ""))
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

    return app
