"""One chat call through LiteLLM with our retry policy (shared by the judge and the simulated user).

Timeouts, connection errors, 429 and 5xx are retried with exponential backoff and full jitter
(wait uniform in ``[0, min(max_backoff_s, backoff_s * 2**retry)]``); other errors are not.
LiteLLM's retries and the OpenAI client's are turned off, so ``max_retries`` is the whole budget
and a server sees exactly ``1 + retries`` requests. ``litellm`` is imported on first use, with
``LITELLM_LOCAL_MODEL_COST_MAP=True`` so that the import fetches nothing.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skyrl_gym.envs.judge.types import LLMCallError, LLMErrorKind

__all__ = ["ChatSettings", "ChatClient", "classify"]

_RETRIED = frozenset(
    {LLMErrorKind.TIMEOUT, LLMErrorKind.CONNECTION, LLMErrorKind.RATE_LIMIT, LLMErrorKind.SERVER}
)


@dataclass(frozen=True)
class ChatSettings:
    """What one model call needs (a view of a judge or simulated-user config)."""

    model: str
    """LiteLLM model name."""
    api_base: str | None
    """OpenAI-compatible base URL, or ``None`` for the provider's hosted API."""
    api_key_env: str
    """Name of the environment variable with the API key."""
    timeout_s: float
    """Deadline of one request."""
    max_retries: int
    """Retries after the first request (transient failures only)."""
    backoff_s: float
    """First backoff; doubles each retry."""
    max_backoff_s: float
    """Cap on one backoff."""
    max_tokens: int
    """Most tokens the model may write."""
    temperature: float
    """Sampling temperature."""


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (LiteLLM wraps a refused connection in an InternalServerError)."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(seen) < 16 and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def classify(exc: BaseException) -> LLMErrorKind:
    """The kind of a LiteLLM/OpenAI exception, its cause chain included."""
    chain = _chain(exc)
    names = [type(e).__name__ for e in chain]
    if any("Timeout" in n for n in names) or any(isinstance(e, TimeoutError) for e in chain):
        return LLMErrorKind.TIMEOUT
    if any("Connect" in n for n in names) or any(isinstance(e, ConnectionError) for e in chain):
        return LLMErrorKind.CONNECTION
    status = getattr(exc, "status_code", None)
    if status == 429 or "RateLimit" in names[0]:
        return LLMErrorKind.RATE_LIMIT
    if (
        isinstance(status, int)
        and status >= 500
        or names[0] in ("InternalServerError", "ServiceUnavailableError")
    ):
        return LLMErrorKind.SERVER
    return LLMErrorKind.REJECTED


def import_litellm(purpose: str) -> Any:
    """``litellm``, or :class:`~skyrl_gym.errors.MissingDependencyError` naming the extra."""
    from skyrl_gym.errors import require

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return require("litellm", "litellm", purpose)


class ChatClient:
    """Calls ``litellm.completion`` with :class:`ChatSettings` and the retry policy above."""

    def __init__(
        self,
        settings: ChatSettings,
        *,
        error: type[LLMCallError] = LLMCallError,
        purpose: str = "a model call",
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self._error = error
        self._purpose = purpose
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._litellm = import_litellm(purpose)

    def _api_key(self) -> str | None:
        key = os.environ.get(self.settings.api_key_env)
        if key is None and self.settings.api_base is not None:
            return "no-key"  # local OpenAI-compatible servers need some key in the header
        return key

    def complete(self, messages: list[dict[str, str]]) -> tuple[str, int]:
        """The reply text and the number of requests made; raises ``error`` when none worked."""
        s = self.settings
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._litellm.completion(
                    model=s.model,
                    messages=messages,
                    api_base=s.api_base,
                    api_key=self._api_key(),
                    timeout=s.timeout_s,
                    max_tokens=s.max_tokens,
                    temperature=s.temperature,
                    num_retries=0,
                    max_retries=0,
                )
            except Exception as exc:  # noqa: BLE001 - classified, then retried or raised
                kind = classify(exc)
                if kind not in _RETRIED or attempt > s.max_retries:
                    raise self._error(
                        f"{self._purpose} ({s.model}) failed after {attempt} attempt(s) ({kind}): "
                        f"{type(exc).__name__}: {str(exc)[:300]}",
                        kind,
                        attempt,
                    ) from exc
                self._sleep(self._rng.uniform(0.0, min(s.max_backoff_s, s.backoff_s * 2 ** (attempt - 1))))
                continue
            choices = getattr(response, "choices", None) or []
            return (choices[0].message.content or "") if choices else "", attempt
