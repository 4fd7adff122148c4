"""The OpenAI wire format: request models, errors, and helpers shared by both endpoints."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from skyrl_agent.types import FLOAT32_TINY, SamplingParams

__all__ = [
    "ApiError",
    "ChatRequest",
    "CompletionRequest",
    "MAX_JSON_DEPTH",
    "check_json_values",
    "sampling_of",
    "visible_text",
]

#: Deepest nesting of JSON values accepted in a request (deeper gets 400).
MAX_JSON_DEPTH = 64
#: The range of a request's ``seed``: a signed 64-bit integer, as OpenAI's API has it.
SEED_RANGE = (-(2**63), 2**63 - 1)
#: Largest ``top_k`` (and ``stop_token_ids`` entry): a signed 32-bit integer.
INT32_MAX = 2**31 - 1


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


#: Most stop strings per request, and most characters in one: every new token is checked
#: against them, so they cost every request of the batch.
MAX_STOPS, MAX_STOP_CHARS = 16, 256
_Stop = Annotated[str, Field(max_length=MAX_STOP_CHARS)]


def _check_top_p(value: float) -> float:
    if not FLOAT32_TINY <= value <= 1:
        raise ValueError(
            f"top_p must be in (0, 1] and at least {FLOAT32_TINY:.3g} (smaller values underflow "
            "float32); use temperature=0 for greedy decoding"
        )
    return value


_TopP = Annotated[
    float,
    AfterValidator(_check_top_p),
    WithJsonSchema({"type": "number", "minimum": FLOAT32_TINY, "maximum": 1}),
]


class _Request(BaseModel):
    # Unknown fields are ignored (clients send many: metadata, parallel_tool_calls, ...); known
    # fields of the wrong type or out of range are a 400 that names the field. Types are strict,
    # as the document states them: "3" or 3.5 for an integer field, or "true" for a boolean, is a
    # 400 (a JSON integer for a number field is fine). NaN and infinity (which Python's JSON
    # parser reads) are refused in every number field.
    model_config = ConfigDict(extra="allow", allow_inf_nan=False, strict=True)

    model: str
    n: int = Field(1, ge=1, description="Samples per prompt (at most the server's max_n).")
    max_tokens: int | None = Field(
        None, ge=1, description="New tokens per sample; prompt plus max_tokens must fit the context."
    )
    temperature: float | None = Field(None, ge=0, le=2, description="0 (or below 1e-5) is greedy.")
    top_p: _TopP | None = Field(
        None, description="Nucleus sampling mass in (0, 1]; below float32's range is refused."
    )
    top_k: int | None = Field(None, ge=-1, le=INT32_MAX, description="-1 or 0 turns the filter off.")
    stop: _Stop | Annotated[list[_Stop], Field(max_length=MAX_STOPS)] | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] | None = Field(None, max_length=1024)
    ignore_eos: bool | None = Field(
        None,
        description="vLLM's extension: generate past end-of-sequence tokens (max_tokens and stops still end it).",
    )
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1], description="A signed 64-bit integer.")
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


_TEXT_PART = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"enum": ["text"]}, "text": {"type": "string"}},
}
#: What the document says a message is; the handler checks it (see ``_chat.normalize_messages``).
MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant", "tool", "function"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_PART}, {"type": "null"}]},
        "name": {"type": "string"},
        "tool_call_id": {"type": "string"},
        "tool_calls": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["function"],
                "properties": {
                    "id": {"type": "string"},
                    "type": {"enum": ["function"]},
                    "function": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "arguments": {"anyOf": [{"type": "string"}, {"type": "object"}]},
                        },
                    },
                },
            },
        },
    },
}


class ChatRequest(_Request):
    """``POST /v1/chat/completions``."""

    messages: list[dict[str, Any]] = Field(min_length=1, json_schema_extra={"items": MESSAGE_SCHEMA})
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


def _surrogate_at(text: str) -> int | None:
    """Index of the first lone UTF-16 surrogate in ``text`` (JSON can spell one, UTF-8 cannot)."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_json_values(req: BaseModel, max_depth: int = MAX_JSON_DEPTH) -> None:
    """400 naming the field for a string with a lone surrogate (no tokenizer, log or UTF-8
    response can hold it) or for values nested deeper than ``max_depth``. Walks without
    recursion, so no request can exhaust the stack."""
    stack: list[tuple[Any, str, int]] = [(v, k, 1) for k, v in req]  # fields, then extra fields
    while stack:
        value, path, depth = stack.pop()
        if depth > max_depth:
            raise ApiError(
                400, f"{path} is nested deeper than {max_depth} levels; send flatter JSON", param=path
            )
        if isinstance(value, str):
            at = _surrogate_at(value)
            if at is not None:
                raise ApiError(
                    400,
                    f"{path} holds a lone UTF-16 surrogate ({value[at]!r} at character {at}); "
                    "send valid Unicode text (surrogates must come in pairs)",
                    param=path,
                )
        elif isinstance(value, dict):
            for k, v in value.items():
                key = str(k)
                if _surrogate_at(key) is not None:
                    raise ApiError(400, f"a key in {path} holds a lone UTF-16 surrogate", param=path)
                stack.append((v, f"{path}.{key}" if len(key) < 64 else f"{path}.<key>", depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))


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
            top_k=max(0, req.top_k or 0),  # -1 (vLLM) and 0 both turn it off
            max_tokens=max_tokens,
            stop=tuple(s for s in stop if s),
            stop_token_ids=tuple(req.stop_token_ids or ()),
            ignore_eos=bool(req.ignore_eos),
            seed=None if req.seed is None else req.seed + index,
            logprobs=True,  # always recorded for training, returned only when asked
            top_logprobs=top_logprobs,
        )
    except ValueError as exc:  # the request model's bounds should have caught it
        field = str(exc).split(" ", 1)[0]
        raise ApiError(400, str(exc), param=field if field in type(req).model_fields else None) from exc


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
