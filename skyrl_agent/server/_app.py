"""The FastAPI application: ``/v1/models``, ``/v1/chat/completions``, ``/v1/completions`` and
the session endpoints. Built by :func:`build_app`; needs the ``serve`` extra."""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations, and
# `fastapi.Request` is only a local name inside build_app (the import is lazy).

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from skyrl_agent.chat import ChatRenderer
from skyrl_agent.server._chat import normalize_messages, prompt_ids_for, split_tool_calls
from skyrl_agent.server._protocol import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    check_unsupported,
    sampling_of,
    token_pieces,
    token_text,
    visible_text,
)
from skyrl_agent.server.sessions import SessionStore
from skyrl_agent.server.types import CallRecord, ChoiceRecord, ServerConfig
from skyrl_agent.types import FinishReason, GenerateOutput, GenerateRequest, Policy
from skyrl_gym.errors import require

__all__ = ["build_app", "SESSION_HEADER"]

log = logging.getLogger(__name__)

#: The request header that names a session (else the ``user`` field, else the default session).
SESSION_HEADER = "X-Session-ID"


class _Core:
    """Everything a request needs: the policy, the renderer, the tool parser, the store."""

    def __init__(self, policy: Policy, config: ServerConfig, store: SessionStore) -> None:
        from skyrl_gym.tools.parsers import get_parser

        self.policy, self.config, self.store = policy, config, store
        self.tok = policy.tokenizer
        self.renderer = ChatRenderer(self.tok, config.chat_template)
        self.parser = get_parser("hermes")  # <tool_call>{json}</tool_call>, as chatml_tools asks
        eos = set(getattr(policy, "eos_token_ids", ()) or ())
        if self.tok.eos_token_id is not None:
            eos.add(int(self.tok.eos_token_id))
        self.eos_ids = eos
        self.vocab = len(self.tok)

    def check_model(self, model: str) -> None:
        if model != self.config.model_name:
            raise ApiError(
                404,
                f"The model {model!r} does not exist; this server serves {self.config.model_name!r}",
                param="model",
                code="model_not_found",
            )

    def max_tokens(self, prompt_len: int, asked: int | None) -> int:
        room = self.config.max_model_len - prompt_len
        if room < 1:
            raise ApiError(
                400,
                f"the prompt has {prompt_len} tokens; this model's context is {self.config.max_model_len}",
                code="context_length_exceeded",
                param="messages",
            )
        if asked is not None and asked > room:
            raise ApiError(
                400,
                f"max_tokens {asked} + prompt {prompt_len} tokens exceeds the context of "
                f"{self.config.max_model_len}; ask for at most {room}",
                code="context_length_exceeded",
                param="max_tokens",
            )
        return asked if asked is not None else min(self.config.default_max_tokens, room)

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        try:
            async with asyncio.timeout(self.config.request_timeout_s):
                return await self.policy.generate(requests)
        except TimeoutError:
            raise ApiError(
                504, f"generation took longer than {self.config.request_timeout_s}s", type="timeout"
            ) from None
        except ApiError:
            raise
        except ValueError as exc:  # a policy's ConfigError: a request it cannot take
            raise ApiError(400, str(exc)) from exc
        except Exception as exc:
            log.exception("policy failed")
            raise ApiError(
                500, f"the policy failed: {type(exc).__name__}: {exc}", type="server_error"
            ) from exc

    def finish(self, out: GenerateOutput, stopped: bool) -> str:
        if out.finish_reason == FinishReason.ABORT:
            return "abort"
        if stopped or out.finish_reason == FinishReason.STOP:
            return "stop"
        return "length"

    def session_of(self, header: str | None, user: str | None) -> str:
        return header or user or self.config.default_session


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def _include_usage(stream_options: dict[str, Any] | None) -> bool:
    return bool(stream_options and stream_options.get("include_usage"))


def _chat_logprobs(core: _Core, ids: Sequence[int], lps: Sequence[float], as_ids: bool) -> dict[str, Any]:
    content = []
    for t, lp in zip(ids, lps, strict=True):
        text = token_text(core.tok, t, as_ids)
        content.append({"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []})
    return {"content": content}


def _completion_logprobs(
    core: _Core, ids: Sequence[int], lps: Sequence[float], as_ids: bool
) -> dict[str, Any]:
    tokens = [token_text(core.tok, t, as_ids) for t in ids]
    offsets, pos = [], 0
    for t in ids:
        offsets.append(pos)
        pos += len(core.tok.decode([t], skip_special_tokens=False))
    return {"tokens": tokens, "token_logprobs": list(lps), "top_logprobs": None, "text_offset": offsets}


def _need_logprobs(out: GenerateOutput) -> list[float]:
    if out.logprobs is None:
        raise ApiError(400, "this server's policy gives no logprobs; ask without logprobs", param="logprobs")
    return out.logprobs


# --------------------------------------------------------------------------- chat
async def _chat(core: _Core, req: ChatRequest, session_header: str | None) -> tuple[dict[str, Any], Any]:
    core.check_model(req.model)
    check_unsupported(req)
    if req.n > core.config.max_n:
        raise ApiError(400, f"n must be at most {core.config.max_n}", param="n")
    if req.top_logprobs:
        raise ApiError(
            400,
            "top_logprobs > 0 is not supported: the policy returns only the chosen tokens' logprobs; "
            "use logprobs=true with top_logprobs unset or 0",
            param="top_logprobs",
        )
    choice = req.tool_choice
    if choice not in (None, "auto", "none"):
        raise ApiError(
            400,
            "tool_choice must be 'auto' or 'none': this server cannot force a tool call",
            param="tool_choice",
        )
    if req.response_format and req.response_format.get("type", "text") != "text":
        raise ApiError(400, "response_format other than text is not supported", param="response_format")
    messages = normalize_messages(req.messages)
    tools = req.tools or None
    session = core.session_of(session_header, req.user)
    cont = core.store.find_continuation(session, messages, tools)
    prompt_ids, reused = prompt_ids_for(core.renderer, messages, tools, cont)
    asked = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    max_tokens = core.max_tokens(len(prompt_ids), asked)
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    outs = await core.generate(
        [GenerateRequest(prompt_ids, sampling_of(req, max_tokens, i), request_id=rid) for i in range(req.n)]
    )
    stops = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    records = []
    for out in outs:
        text, stopped = visible_text(
            core.tok,
            out.token_ids,
            core.eos_ids,
            stops,
            skip_special_tokens=req.skip_special_tokens,
            include_stop=req.include_stop_str_in_output,
        )
        finish = core.finish(out, stopped)
        content, calls = (text, [])
        if tools and choice != "none":
            content, calls = split_tool_calls(core.parser, text)
            if calls:
                finish = "tool_calls"
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        records.append(
            ChoiceRecord(list(out.token_ids), out.logprobs, finish, text=content or "", message=message)
        )
    call = CallRecord(
        "chat",
        list(prompt_ids),
        records,
        messages=messages,
        tools=tools,
        reused_ids=reused,
        request_id=rid,
        created=time.time(),
    )
    if req.logprobs:
        for out in outs:
            _need_logprobs(out)  # before anything is recorded or streamed
    core.store.record(session, call)
    created = int(call.created)
    as_ids = req.return_tokens_as_token_ids
    if req.stream:
        return {}, _chat_stream(core, req, call, outs, created)
    choices = []
    for i, (rec, out) in enumerate(zip(records, outs, strict=True)):
        c: dict[str, Any] = {"index": i, "message": rec.message, "finish_reason": rec.finish_reason}
        c["logprobs"] = (
            _chat_logprobs(core, out.token_ids, _need_logprobs(out), as_ids) if req.logprobs else None
        )
        if req.return_token_ids:
            c["token_ids"] = rec.token_ids
        choices.append(c)
    body: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": core.config.model_name,
        "choices": choices,
        "usage": _usage(len(prompt_ids), sum(len(r.token_ids) for r in records)),
    }
    if req.return_token_ids:
        body["prompt_token_ids"] = call.prompt_ids
    return body, None


async def _chat_stream(
    core: _Core, req: ChatRequest, call: CallRecord, outs: list[GenerateOutput], created: int
) -> AsyncIterator[str]:
    """Chunks of an answer generated whole: per token for plain text, the content then the
    tool calls when there are any, a closing chunk per choice, usage if asked, ``[DONE]``."""
    as_ids = req.return_tokens_as_token_ids

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, lp: Any = None) -> str:
        c = {"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish}
        head = {"id": call.request_id, "object": "chat.completion.chunk", "created": created}
        return _sse({**head, "model": core.config.model_name, "choices": [c]})

    for i, (rec, out) in enumerate(zip(call.choices, outs, strict=True)):
        lps = _need_logprobs(out) if req.logprobs else None
        yield chunk(i, {"role": "assistant", "content": ""})
        calls = (rec.message or {}).get("tool_calls") or []
        if calls:
            lp = _chat_logprobs(core, out.token_ids, lps, as_ids) if lps is not None else None
            if rec.text or lp is not None:
                yield chunk(i, {"content": rec.text}, lp=lp)
            for k, tc in enumerate(calls):
                yield chunk(i, {"tool_calls": [{"index": k, **tc}]})
        else:
            pieces = token_pieces(core.tok, out.token_ids, rec.text, req.skip_special_tokens)
            for k, piece in enumerate(pieces):
                if piece or lps is not None:
                    lp = (
                        _chat_logprobs(core, out.token_ids[k : k + 1], lps[k : k + 1], as_ids)
                        if lps
                        else None
                    )
                    yield chunk(i, {"content": piece}, lp=lp)
        yield chunk(i, {}, finish=rec.finish_reason)
        await asyncio.sleep(0)
    if _include_usage(req.stream_options):
        usage = _usage(len(call.prompt_ids), sum(len(r.token_ids) for r in call.choices))
        head = {"id": call.request_id, "object": "chat.completion.chunk", "created": created}
        yield _sse({**head, "model": core.config.model_name, "choices": [], "usage": usage})
    yield "data: [DONE]\n\n"


# --------------------------------------------------------------------------- completions
def _prompts(core: _Core, prompt: Any) -> list[list[int]]:
    if isinstance(prompt, str):
        items: list[Any] = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        items = [prompt]
    else:
        items = list(prompt)
    if not items:
        raise ApiError(400, "prompt is empty", param="prompt")
    out = []
    for p in items:
        ids = core.tok.encode(p) if isinstance(p, str) else list(p)
        if not ids:
            raise ApiError(400, "a prompt has no tokens", param="prompt")
        bad = [t for t in ids if not 0 <= t < core.vocab]
        if bad:
            raise ApiError(
                400, f"token ids {bad[:5]} are outside the vocabulary (0..{core.vocab - 1})", param="prompt"
            )
        out.append(ids)
    return out


async def _complete(
    core: _Core, req: CompletionRequest, session_header: str | None
) -> tuple[dict[str, Any], Any]:
    core.check_model(req.model)
    check_unsupported(req)
    if req.n > core.config.max_n:
        raise ApiError(400, f"n must be at most {core.config.max_n}", param="n")
    if req.logprobs:
        raise ApiError(
            400,
            "logprobs > 0 (top alternatives) is not supported: the policy returns only the chosen "
            "tokens' logprobs; use logprobs=0",
            param="logprobs",
        )
    if req.echo:
        raise ApiError(400, "echo is not supported", param="echo")
    if req.suffix:
        raise ApiError(400, "suffix is not supported", param="suffix")
    if req.best_of is not None and req.best_of != req.n:
        raise ApiError(400, "best_of other than n is not supported", param="best_of")
    prompts = _prompts(core, req.prompt)
    limits = [core.max_tokens(len(p), req.max_tokens) for p in prompts]
    rid = f"cmpl-{uuid.uuid4().hex}"
    requests = [
        GenerateRequest(p, sampling_of(req, mt, i), request_id=rid)
        for p, mt in zip(prompts, limits, strict=True)
        for i in range(req.n)
    ]
    outs = await core.generate(requests)
    if req.logprobs is not None:
        for out in outs:
            _need_logprobs(out)  # before anything is recorded or streamed
    stops = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    session = core.session_of(session_header, req.user)
    want_lp = req.logprobs is not None
    calls, choices = [], []
    for pi, p in enumerate(prompts):
        records = []
        for j in range(req.n):
            out = outs[pi * req.n + j]
            text, stopped = visible_text(
                core.tok,
                out.token_ids,
                core.eos_ids,
                stops,
                skip_special_tokens=req.skip_special_tokens,
                include_stop=req.include_stop_str_in_output,
            )
            rec = ChoiceRecord(list(out.token_ids), out.logprobs, core.finish(out, stopped), text=text)
            records.append(rec)
            c: dict[str, Any] = {"index": pi * req.n + j, "text": text, "finish_reason": rec.finish_reason}
            c["logprobs"] = (
                _completion_logprobs(core, out.token_ids, _need_logprobs(out), req.return_tokens_as_token_ids)
                if want_lp
                else None
            )
            if req.return_token_ids:
                c["token_ids"] = rec.token_ids
                c["prompt_token_ids"] = p
            choices.append((c, out))
        call = CallRecord("completion", p, records, request_id=rid, created=time.time())
        core.store.record(session, call)
        calls.append(call)
    created = int(time.time())
    usage = _usage(sum(len(p) for p in prompts), sum(len(o.token_ids) for o in outs))
    if req.stream:
        return {}, _completion_stream(core, req, rid, created, choices, usage)
    body = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": core.config.model_name,
        "choices": [c for c, _ in choices],
        "usage": usage,
    }
    return body, None


async def _completion_stream(
    core: _Core,
    req: CompletionRequest,
    rid: str,
    created: int,
    choices: list[tuple[dict[str, Any], GenerateOutput]],
    usage: dict[str, int],
) -> AsyncIterator[str]:
    head = {"id": rid, "object": "text_completion", "created": created, "model": core.config.model_name}
    for c, out in choices:
        pieces = token_pieces(core.tok, out.token_ids, c["text"], req.skip_special_tokens)
        lps = c["logprobs"]
        for k, piece in enumerate(pieces):
            if not piece and lps is None:
                continue
            lp = None
            if lps is not None:
                lp = {key: (v[k : k + 1] if isinstance(v, list) else v) for key, v in lps.items()}
            yield _sse(
                {
                    **head,
                    "choices": [{"index": c["index"], "text": piece, "logprobs": lp, "finish_reason": None}],
                }
            )
        yield _sse(
            {
                **head,
                "choices": [
                    {"index": c["index"], "text": "", "logprobs": None, "finish_reason": c["finish_reason"]}
                ],
            }
        )
        await asyncio.sleep(0)
    if _include_usage(req.stream_options):
        yield _sse({**head, "choices": [], "usage": usage})
    yield "data: [DONE]\n\n"


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
    core = _Core(policy, config, store)
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
