"""Data types of the OpenAI-compatible server: its configuration and what it records per call."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["ServerConfig", "ChoiceRecord", "CallRecord", "CallKind"]

#: Which endpoint a call came through.
CallKind = Literal["chat", "completion"]


@dataclass(frozen=True)
class ServerConfig:
    """How the server answers (pickles; builds nothing)."""

    model_name: str = "smollm2-135m"
    """The name listed at ``/v1/models``; a request naming another model gets 404."""
    chat_template: str | None = None
    """Chat template for ``/v1/chat/completions``: None for the tokenizer's own (``chatml_tools``
    when tools are given and the own template has none), a shipped name, or a Jinja source."""
    max_model_len: int = 4096
    """Most tokens in prompt plus completion; longer prompts get 400."""
    default_max_tokens: int = 512
    """New tokens when a request sets no ``max_tokens`` (cut to what fits in ``max_model_len``)."""
    max_n: int = 16
    """Largest ``n`` accepted."""
    default_session: str = "default"
    """Session of calls that carry neither an ``X-Session-ID`` header nor a ``user`` field."""
    max_sessions: int = 4096
    """Most sessions kept; past it the least recently used session is dropped (and logged)."""
    max_calls_per_session: int = 100_000
    """Most calls kept per session; past it the oldest are dropped (and logged once). A bound for
    servers whose clients name no session, so everything lands in the default one."""
    api_key: str | None = None
    """When set, every ``/v1`` request must send ``Authorization: Bearer <api_key>`` (else 401)."""
    request_timeout_s: float = 600.0
    """Deadline of one generation; past it the request gets 504 and nothing is recorded."""
    max_request_bytes: int = 16 * 2**20
    """Largest request body accepted (16 MiB); a larger one gets 413 before it is parsed."""
    body_timeout_s: float = 60.0
    """Deadline for a request body to arrive once its headers have; a client that stalls
    gets 408 and its connection closed, instead of holding it open for ever."""
    max_prompt_chars: int | None = None
    """Most characters of prompt text in one request (message contents, tools, completion
    prompts), checked before tokenizing; more gets 400. None: 64 per token of
    ``max_model_len`` (see :attr:`prompt_char_limit`). After tokenizing, the prompt must leave
    room for at least one new token in ``max_model_len``."""

    def __post_init__(self) -> None:
        from skyrl_gym.errors import ConfigError

        for name in (
            "max_model_len",
            "default_max_tokens",
            "max_n",
            "max_sessions",
            "max_calls_per_session",
            "max_request_bytes",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"ServerConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_prompt_chars is not None and self.max_prompt_chars < 1:
            raise ConfigError(
                f"ServerConfig.max_prompt_chars must be >= 1 or None, got {self.max_prompt_chars}"
            )
        for name in ("request_timeout_s", "body_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"ServerConfig.{name} must be positive seconds, got {getattr(self, name)}")

    @property
    def prompt_char_limit(self) -> int:
        """``max_prompt_chars``, or 64 characters per token of ``max_model_len`` when unset (no
        real prompt that fits the context averages more than 64 characters a token)."""
        return self.max_prompt_chars if self.max_prompt_chars is not None else 64 * self.max_model_len


@dataclass
class ChoiceRecord:
    """One sampled completion of a call, exactly as the policy produced it."""

    token_ids: list[int]
    """The sampled ids (a final end-of-sequence token and stop-string tokens included)."""
    logprobs: list[float] | None
    """Raw (temperature 1) logprob of each sampled id; None when the policy gives none."""
    finish_reason: str
    """As returned to the client: ``stop``, ``length``, ``tool_calls`` or ``abort``."""
    text: str = ""
    """The text returned to the client (stop string and tool-call markup removed as answered)."""
    message: dict[str, Any] | None = None
    """Chat calls: the assistant message returned (``content`` and ``tool_calls``)."""


@dataclass
class CallRecord:
    """One request to the server: the prompt ids it generated from and its ``n`` choices."""

    kind: CallKind
    """``chat`` or ``completion``."""
    prompt_ids: list[int]
    """The ids the policy was fed."""
    choices: list[ChoiceRecord]
    """One per sample (``n``), in index order."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """Chat calls: the request's messages (text parts joined); empty for completions."""
    tools: list[dict[str, Any]] | None = None
    """Chat calls: the request's tools."""
    reused_ids: int = 0
    """How many leading prompt ids were taken verbatim from an earlier call of the session
    (its prompt and sampled ids) instead of rendering the messages again; 0 when rendered fresh."""
    request_id: str = ""
    """The id of the response (``chatcmpl-...`` / ``cmpl-...``)."""
    created: float = 0.0
    """Unix time the call finished."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)
