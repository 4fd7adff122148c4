"""The OpenAI wire format: request models, errors, and helpers shared by both endpoints."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from skyrl_agent.types import SamplingParams

__all__ = ["ApiError", "ChatRequest", "CompletionRequest", "sampling_of", "visible_text"]


class ApiError(Exception):
    """An error answered as OpenAI's ``{"error": {...}}`` JSON with an HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # noqa: A002 - the wire name
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict[str, Any]:
        """The JSON body."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class _Request(BaseModel):
    # Unknown fields are ignored (clients send many: metadata, parallel_tool_calls, ...); known
    # fields of the wrong type are a 400.
    model_config = ConfigDict(extra="allow")

    model: str
    n: int = Field(1, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    seed: int | None = None
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    # vLLM extensions (the runtime's OpenAICompatPolicy sends them)
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False


class ChatRequest(_Request):
    """``POST /v1/chat/completions``."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None


class CompletionRequest(_Request):
    """``POST /v1/completions``."""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = None


def check_unsupported(req: _Request) -> None:
    """400 for options the server cannot honour (rather than silently ignoring them)."""
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            raise ApiError(400, f"{name} is not supported by this server; leave it unset or 0", param=name)
    if req.logit_bias:
        raise ApiError(400, "logit_bias is not supported by this server", param="logit_bias")


def sampling_of(req: _Request, max_tokens: int, index: int, top_logprobs: int = 0) -> SamplingParams:
    """The policy's sampling parameters for sample ``index`` of ``req`` (sample ``i`` of a seeded
    request uses ``seed + i``, so the ``n`` samples differ and the request repeats);
    ``top_logprobs`` alternatives per token when asked."""
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    try:
        return SamplingParams(
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=max(0, req.top_k or 0),
            max_tokens=max_tokens,
            stop=tuple(s for s in stop if s),
            stop_token_ids=tuple(req.stop_token_ids or ()),
            seed=None if req.seed is None else req.seed + index,
            logprobs=True,  # always recorded for training, returned only when asked
            top_logprobs=top_logprobs,
        )
    except ValueError as exc:
        raise ApiError(400, str(exc)) from exc


def visible_text(
    tokenizer: Any,
    token_ids: list[int],
    eos_ids: set[int],
    stops: tuple[str, ...],
    *,
    skip_special_tokens: bool,
    include_stop: bool,
) -> tuple[str, bool]:
    """The text answered for ``token_ids``: decoded without a final end-of-sequence token, cut
    before the first stop string unless ``include_stop``. Returns (text, a stop string matched)."""
    ids = token_ids[:-1] if token_ids and token_ids[-1] in eos_ids else token_ids
    text = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    hits = [(text.find(s), s) for s in stops if s and s in text]
    if not hits:
        return text, False
    pos, stop = min(hits)
    return (text[: pos + len(stop)] if include_stop else text[:pos]), True


def token_pieces(tokenizer: Any, token_ids: list[int], text: str, skip_special_tokens: bool) -> list[str]:
    """Split ``text`` (a prefix of the decoded ``token_ids``) into one piece per token, for
    streaming: piece ``k`` is what token ``k`` adds to the decoded prefix (possibly "")."""
    pieces = []
    prev = 0
    for k in range(len(token_ids)):
        decoded = tokenizer.decode(token_ids[: k + 1], skip_special_tokens=skip_special_tokens)
        if decoded.endswith("\ufffd"):  # an incomplete UTF-8 character: wait for the next token
            pieces.append("")
            continue
        end = min(len(decoded), len(text))
        pieces.append(text[prev:end] if end > prev else "")
        prev = max(prev, end)
    if prev < len(text) and pieces:
        pieces[-1] += text[prev:]
    return pieces


def token_text(tokenizer: Any, token_id: int, as_id: bool) -> str:
    """The token's text as logprobs list it (``token_id:N`` when asked for ids)."""
    return f"token_id:{token_id}" if as_id else tokenizer.decode([token_id], skip_special_tokens=False)
