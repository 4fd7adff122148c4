"""What every request handler needs: the policy, the renderer, the tool parser, the session
store, and the wire-format helpers for usage and logprobs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from skyrl_agent.chat import ChatRenderer
from skyrl_agent.server._guard import render_json
from skyrl_agent.server._protocol import ApiError, token_text
from skyrl_agent.server.sessions import SessionStore
from skyrl_agent.server.types import ServerConfig
from skyrl_agent.types import FinishReason, GenerateOutput, GenerateRequest, Policy

__all__ = [
    "Core",
    "chat_logprobs",
    "completion_logprobs",
    "include_usage",
    "need_logprobs",
    "need_top_logprobs",
    "sse",
    "usage_of",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Core:
    """Everything a request needs: the policy, the renderer, the tool parser, the store, and
    one worker thread for tokenizing (and other CPU work whose cost grows with a request), so
    the event loop keeps answering other clients meanwhile."""

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
        # One thread: the renderer's caches and a fast tokenizer are not safe to share across
        # threads, and one thread bounds the memory that concurrent large prompts hold.
        self._cpu = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="skyrl-serve-tokenize")

    async def off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the tokenizing thread."""
        return await asyncio.get_running_loop().run_in_executor(self._cpu, functools.partial(fn, *args))

    def close(self) -> None:
        """Stop the tokenizing thread. Idempotent."""
        self._cpu.shutdown(wait=False, cancel_futures=True)

    def check_prompt_chars(self, chars: int, param: str) -> None:
        """400 naming the limit for prompt text longer than the server takes (before tokenizing)."""
        limit = self.config.prompt_char_limit
        if chars > limit:
            raise ApiError(
                400,
                f"the prompt has {chars} characters, more than this server's limit of {limit} "
                f"(ServerConfig.max_prompt_chars; the context is {self.config.max_model_len} tokens); "
                "send a shorter prompt",
                param=param,
                code="context_length_exceeded",
            )

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


def usage_of(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def sse(obj: Any) -> str:
    """One server-sent event (rendered like every JSON answer: never an invalid number)."""
    return f"data: {render_json(obj).decode()}\n\n"


def include_usage(stream_options: dict[str, Any] | None) -> bool:
    return bool(stream_options and stream_options.get("include_usage"))


Tops = Sequence[Sequence[tuple[int, float]]]


def chat_logprobs(
    core: Core, ids: Sequence[int], lps: Sequence[float], as_ids: bool, tops: Tops | None = None
) -> dict[str, Any]:
    """OpenAI chat ``logprobs``: per token its text, logprob, UTF-8 bytes and ``top_logprobs``
    (the most likely alternatives when ``tops`` is given, else [])."""
    content = []
    for k, (t, lp) in enumerate(zip(ids, lps, strict=True)):
        text = token_text(core.tok, t, as_ids)
        alternatives = []
        for alt, alt_lp in tops[k] if tops is not None else ():
            alt_text = token_text(core.tok, alt, as_ids)
            alternatives.append({"token": alt_text, "logprob": alt_lp, "bytes": list(alt_text.encode())})
        content.append(
            {"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": alternatives}
        )
    return {"content": content}


def completion_logprobs(
    core: Core, ids: Sequence[int], lps: Sequence[float], as_ids: bool, tops: Tops | None = None
) -> dict[str, Any]:
    """OpenAI completions ``logprobs``: tokens, their logprobs, text offsets, and per token a
    ``{token text: logprob}`` dict of the most likely alternatives when ``tops`` is given."""
    tokens = [token_text(core.tok, t, as_ids) for t in ids]
    offsets, pos = [], 0
    for t in ids:
        offsets.append(pos)
        pos += len(core.tok.decode([t], skip_special_tokens=False))
    top = None
    if tops is not None:
        top = [{token_text(core.tok, alt, as_ids): alt_lp for alt, alt_lp in row} for row in tops]
    return {"tokens": tokens, "token_logprobs": list(lps), "top_logprobs": top, "text_offset": offsets}


def need_top_logprobs(out: GenerateOutput) -> Tops:
    if out.top_logprobs is None:
        raise ApiError(
            400,
            "this server's policy gives no top logprobs; ask without top_logprobs (chat) or with logprobs=0",
            param="top_logprobs",
        )
    return out.top_logprobs


def need_logprobs(out: GenerateOutput) -> list[float]:
    if out.logprobs is None:
        raise ApiError(400, "this server's policy gives no logprobs; ask without logprobs", param="logprobs")
    return out.logprobs
