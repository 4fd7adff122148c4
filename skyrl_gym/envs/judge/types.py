"""Data types of the judge env: the judge config, a verdict, and the judge's failure."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from skyrl_gym.errors import ConfigError, InfrastructureError

__all__ = [
    "JudgeConfig",
    "JudgeKind",
    "VerdictFormat",
    "Verdict",
    "LLMCallError",
    "LLMErrorKind",
    "JudgeError",
    "JudgeErrorKind",
    "SimulatedUserError",
    "SimulatedUserConfig",
    "UserKind",
]

#: ``scripted``: an offline user that answers from keyword rules. ``llm``: a model through LiteLLM.
UserKind = Literal["scripted", "llm"]

#: ``llm``: an LLM judge through LiteLLM. ``exact``: an offline string-match judge (deterministic).
JudgeKind = Literal["llm", "exact"]
#: ``binary``: the judge ends with ``VERDICT: CORRECT|INCORRECT`` (reward 1/0). ``score``: it ends
#: with ``SCORE: n`` for n in 0..10 (reward n/10).
VerdictFormat = Literal["binary", "score"]


@dataclass(frozen=True)
class JudgeConfig:
    """How answers are graded. Built from ``env_config`` by the env (same key names)."""

    judge: JudgeKind = "llm"
    """``llm`` (needs ``judge_model``) or ``exact`` (offline: the normalized reference, or one of
    ``accept``, must appear as a whole phrase in the normalized answer)."""
    judge_model: str | None = None
    """LiteLLM model name, e.g. ``openai/Qwen2.5-7B-Instruct`` for an OpenAI-compatible server."""
    api_base: str | None = None
    """Base URL of an OpenAI-compatible server, e.g. ``http://127.0.0.1:8000/v1``; ``None`` uses
    the provider's hosted API."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key (the key itself never sits in a
    config). With ``api_base`` set and the variable unset, a placeholder key is sent."""
    verdict: VerdictFormat = "binary"
    """The verdict the rubric asks for and the parser reads."""
    timeout_s: float = 30.0
    """Deadline of one judge request, seconds."""
    max_retries: int = 3
    """Retries after the first request, on timeouts, connection errors, 429 and 5xx only."""
    backoff_s: float = 0.5
    """First backoff; doubles each retry, with full jitter."""
    max_backoff_s: float = 8.0
    """Cap on one backoff."""
    max_answer_chars: int = 4000
    """The model's answer is cut (middle elided) to this many characters before it is sent."""
    max_tokens: int = 512
    """Most tokens the judge may write."""
    temperature: float = 0.0
    """Sampling temperature of the judge."""

    def __post_init__(self) -> None:
        if self.judge not in ("llm", "exact"):
            raise ConfigError(f"unknown judge {self.judge!r}; use 'llm' or 'exact'")
        if self.verdict not in ("binary", "score"):
            raise ConfigError(f"unknown verdict {self.verdict!r}; use 'binary' or 'score'")
        if self.judge == "llm" and not self.judge_model:
            raise ConfigError(
                "judge='llm' needs env_config['judge_model'] (e.g. 'openai/<name>' with api_base "
                "'http://127.0.0.1:8000/v1'); set judge='exact' to grade offline by string match"
            )
        if self.timeout_s <= 0 or self.max_retries < 0 or self.max_answer_chars < 16 or self.max_tokens < 1:
            raise ConfigError(
                "timeout_s must be > 0, max_retries >= 0, max_answer_chars >= 16, max_tokens >= 1"
            )


@dataclass(frozen=True)
class SimulatedUserConfig:
    """Who plays the user in ``ask_user``. Built from ``env_config`` by the env (same key names)."""

    user: UserKind = "scripted"
    """``scripted`` (offline, deterministic: replies with every private fact whose keywords the
    assistant's message mentions) or ``llm`` (needs ``user_model``)."""
    user_model: str | None = None
    """LiteLLM model name of the simulated user, e.g. ``openai/<name>``."""
    api_base: str | None = None
    """Base URL of an OpenAI-compatible server; ``None`` uses the provider's hosted API."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key."""
    timeout_s: float = 30.0
    """Deadline of one request, seconds."""
    max_retries: int = 3
    """Retries after the first request, on timeouts, connection errors, 429 and 5xx only."""
    backoff_s: float = 0.5
    """First backoff; doubles each retry, with full jitter."""
    max_backoff_s: float = 8.0
    """Cap on one backoff."""
    max_tokens: int = 128
    """Most tokens a user reply may have."""
    temperature: float = 0.0
    """Sampling temperature of the simulated user."""
    max_message_chars: int = 2000
    """Each assistant message is cut (middle elided) to this many characters before the user
    model sees it."""

    def __post_init__(self) -> None:
        if self.user not in ("scripted", "llm"):
            raise ConfigError(f"unknown user {self.user!r}; use 'scripted' or 'llm'")
        if self.user == "llm" and not self.user_model:
            raise ConfigError(
                "user='llm' needs env_config['user_model'] (e.g. 'openai/<name>' with api_base "
                "'http://127.0.0.1:8000/v1'); user='scripted' answers offline from keyword rules"
            )
        if self.timeout_s <= 0 or self.max_retries < 0 or self.max_message_chars < 16 or self.max_tokens < 1:
            raise ConfigError(
                "timeout_s must be > 0, max_retries >= 0, max_message_chars >= 16, max_tokens >= 1"
            )


@dataclass(frozen=True)
class Verdict:
    """A judge's grade of one answer."""

    correct: bool
    """Whether the answer counts as correct (score >= 0.5 for the score format)."""
    score: float
    """The reward, in [0, 1]."""
    raw: str
    """The judge's reply (or a short description for the exact judge)."""
    attempts: int = 1
    """Requests made to get it (1 plus retries)."""


class LLMErrorKind(StrEnum):
    """Why a model call (a judge, a simulated user) gave no usable reply."""

    CONNECTION = "connection"
    TIMEOUT = "timeout"
    RATE_LIMIT = "rate_limit"
    SERVER = "server"
    REJECTED = "rejected"
    """A 4xx other than 429 (bad model name, bad key): not retried."""
    UNPARSABLE = "unparsable"
    """The reply held no verdict in the expected format: not retried."""


JudgeErrorKind = LLMErrorKind
"""The kinds of :class:`JudgeError` (the same as :class:`LLMErrorKind`)."""


class LLMCallError(InfrastructureError):
    """A model call that an env depends on failed (after retries where they apply): an
    infrastructure failure. ``env.step`` raises it so that the runtime records the failure and
    masks the episode; it is never turned into a reward of 0."""

    def __init__(self, message: str, kind: str = LLMErrorKind.SERVER, attempts: int = 0) -> None:
        super().__init__(message)
        self.kind, self.attempts = LLMErrorKind(kind), attempts

    def __reduce__(self):  # noqa: ANN204 - pickles with its fields
        return (self.__class__, (self.args[0], str(self.kind), self.attempts))


class JudgeError(LLMCallError):
    """The judge gave no verdict: it failed after retries, refused the request, or its reply held
    no verdict line."""


class SimulatedUserError(LLMCallError):
    """The simulated user's model failed after retries or refused the request."""
