"""The two generation endpoints: ``/v1/chat/completions`` and ``/v1/completions``, whole or
streamed (an answer generated whole, then sent as OpenAI SSE chunks)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from skyrl_agent.server._chat import normalize_messages, prompt_chars, prompt_ids_for, split_tool_calls
from skyrl_agent.server._core import (
    Core,
    chat_logprobs,
    completion_logprobs,
    include_usage,
    need_logprobs,
    need_top_logprobs,
    sse,
    usage_of,
)
from skyrl_agent.server._protocol import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    check_json_values,
    check_unsupported,
    sampling_of,
    token_pieces,
    visible_text,
)
from skyrl_agent.server.types import CallRecord, ChoiceRecord
from skyrl_agent.types import GenerateOutput, GenerateRequest

__all__ = ["chat", "complete"]


# --------------------------------------------------------------------------- chat
async def chat(core: Core, req: ChatRequest, session_header: str | None) -> tuple[dict[str, Any], Any]:
    check_json_values(req)
    core.check_model(req.model)
    check_unsupported(req)
    if req.n > core.config.max_n:
        raise ApiError(400, f"n must be at most {core.config.max_n}", param="n")
    top = req.top_logprobs or 0
    if top and not req.logprobs:
        raise ApiError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
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
    core.check_prompt_chars(prompt_chars(messages, tools), "messages")
    session = core.session_of(session_header, req.user)
    prompt_ids, reused = await core.off_loop(_chat_prompt, core, session, messages, tools)
    asked = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    max_tokens = core.max_tokens(len(prompt_ids), asked)
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    outs = await core.generate(
        [
            GenerateRequest(prompt_ids, sampling_of(req, max_tokens, i, top), request_id=rid)
            for i in range(req.n)
        ]
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
            need_logprobs(out)  # before anything is recorded or streamed
            if top:
                need_top_logprobs(out)
    core.store.record(session, call)
    created = int(call.created)
    as_ids = req.return_tokens_as_token_ids
    if req.stream:
        return {}, _chat_stream(core, req, call, outs, created)
    choices = []
    for i, (rec, out) in enumerate(zip(records, outs, strict=True)):
        c: dict[str, Any] = {"index": i, "message": rec.message, "finish_reason": rec.finish_reason}
        c["logprobs"] = (
            chat_logprobs(core, out.token_ids, need_logprobs(out), as_ids, out.top_logprobs if top else None)
            if req.logprobs
            else None
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
        "usage": usage_of(len(prompt_ids), sum(len(r.token_ids) for r in records)),
    }
    if req.return_token_ids:
        body["prompt_token_ids"] = call.prompt_ids
    return body, None


def _chat_prompt(
    core: Core, session: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[list[int], int]:
    cont = core.store.find_continuation(session, messages, tools)
    return prompt_ids_for(core.renderer, messages, tools, cont)


async def _chat_stream(
    core: Core, req: ChatRequest, call: CallRecord, outs: list[GenerateOutput], created: int
) -> AsyncIterator[str]:
    """Chunks of an answer generated whole: per token for plain text, the content then the
    tool calls when there are any, a closing chunk per choice, usage if asked, ``[DONE]``."""
    as_ids = req.return_tokens_as_token_ids

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, lp: Any = None) -> str:
        c = {"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish}
        head = {"id": call.request_id, "object": "chat.completion.chunk", "created": created}
        return sse({**head, "model": core.config.model_name, "choices": [c]})

    for i, (rec, out) in enumerate(zip(call.choices, outs, strict=True)):
        lps = need_logprobs(out) if req.logprobs else None
        tops = out.top_logprobs if req.top_logprobs else None
        yield chunk(i, {"role": "assistant", "content": ""})
        calls = (rec.message or {}).get("tool_calls") or []
        if calls:
            lp = chat_logprobs(core, out.token_ids, lps, as_ids, tops) if lps is not None else None
            if rec.text or lp is not None:
                yield chunk(i, {"content": rec.text}, lp=lp)
            for k, tc in enumerate(calls):
                yield chunk(i, {"tool_calls": [{"index": k, **tc}]})
        else:
            pieces = await core.off_loop(
                token_pieces, core.tok, out.token_ids, rec.text, req.skip_special_tokens
            )
            for k, piece in enumerate(pieces):
                if piece or lps is not None:
                    lp = (
                        chat_logprobs(
                            core,
                            out.token_ids[k : k + 1],
                            lps[k : k + 1],
                            as_ids,
                            tops[k : k + 1] if tops is not None else None,
                        )
                        if lps
                        else None
                    )
                    yield chunk(i, {"content": piece}, lp=lp)
        yield chunk(i, {}, finish=rec.finish_reason)
        await asyncio.sleep(0)
    if include_usage(req.stream_options):
        usage = usage_of(len(call.prompt_ids), sum(len(r.token_ids) for r in call.choices))
        head = {"id": call.request_id, "object": "chat.completion.chunk", "created": created}
        yield sse({**head, "model": core.config.model_name, "choices": [], "usage": usage})
    yield "data: [DONE]\n\n"


# --------------------------------------------------------------------------- completions
def _prompt_items(core: Core, prompt: Any, n: int) -> list[str | list[int]]:
    """The request's prompts (text or token ids), checked for count and size before tokenizing."""
    if isinstance(prompt, str):
        items: list[Any] = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        items = [prompt]
    else:
        items = list(prompt)
    if not items:
        raise ApiError(400, "prompt is empty", param="prompt")
    if len(items) * n > core.config.max_n:
        raise ApiError(
            400,
            f"{len(items)} prompts x n={n} samples is more than this server's max_n of "
            f"{core.config.max_n} sequences per request; send fewer prompts or a smaller n",
            param="prompt",
        )
    core.check_prompt_chars(sum(len(p) for p in items if isinstance(p, str)), "prompt")
    for p in items:
        if not isinstance(p, str) and len(p) >= core.config.max_model_len:
            raise ApiError(
                400,
                f"a prompt has {len(p)} tokens; this model's context is {core.config.max_model_len}",
                code="context_length_exceeded",
                param="prompt",
            )
    return items


def _tokenize(core: Core, items: list[str | list[int]]) -> list[list[int]]:
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


async def complete(
    core: Core, req: CompletionRequest, session_header: str | None
) -> tuple[dict[str, Any], Any]:
    check_json_values(req)
    core.check_model(req.model)
    check_unsupported(req)
    if req.n > core.config.max_n:
        raise ApiError(400, f"n must be at most {core.config.max_n}", param="n")
    top = req.logprobs or 0  # completions: logprobs=N asks for N alternatives per token
    if req.echo:
        raise ApiError(400, "echo is not supported", param="echo")
    if req.suffix:
        raise ApiError(400, "suffix is not supported", param="suffix")
    if req.best_of is not None and req.best_of != req.n:
        raise ApiError(400, "best_of other than n is not supported", param="best_of")
    prompts = await core.off_loop(_tokenize, core, _prompt_items(core, req.prompt, req.n))
    limits = [core.max_tokens(len(p), req.max_tokens) for p in prompts]
    rid = f"cmpl-{uuid.uuid4().hex}"
    requests = [
        GenerateRequest(p, sampling_of(req, mt, i, top), request_id=rid)
        for p, mt in zip(prompts, limits, strict=True)
        for i in range(req.n)
    ]
    outs = await core.generate(requests)
    if req.logprobs is not None:
        for out in outs:
            need_logprobs(out)  # before anything is recorded or streamed
            if top:
                need_top_logprobs(out)
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
                completion_logprobs(
                    core,
                    out.token_ids,
                    need_logprobs(out),
                    req.return_tokens_as_token_ids,
                    out.top_logprobs if top else None,
                )
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
    usage = usage_of(sum(len(p) for p in prompts), sum(len(o.token_ids) for o in outs))
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
    core: Core,
    req: CompletionRequest,
    rid: str,
    created: int,
    choices: list[tuple[dict[str, Any], GenerateOutput]],
    usage: dict[str, int],
) -> AsyncIterator[str]:
    head = {"id": rid, "object": "text_completion", "created": created, "model": core.config.model_name}
    for c, out in choices:
        pieces = await core.off_loop(
            token_pieces, core.tok, out.token_ids, c["text"], req.skip_special_tokens
        )
        lps = c["logprobs"]
        for k, piece in enumerate(pieces):
            if not piece and lps is None:
                continue
            lp = None
            if lps is not None:
                lp = {key: (v[k : k + 1] if isinstance(v, list) else v) for key, v in lps.items()}
            yield sse(
                {
                    **head,
                    "choices": [{"index": c["index"], "text": piece, "logprobs": lp, "finish_reason": None}],
                }
            )
        yield sse(
            {
                **head,
                "choices": [
                    {"index": c["index"], "text": "", "logprobs": None, "finish_reason": c["finish_reason"]}
                ],
            }
        )
        await asyncio.sleep(0)
    if include_usage(req.stream_options):
        yield sse({**head, "choices": [], "usage": usage})
    yield "data: [DONE]\n\n"
