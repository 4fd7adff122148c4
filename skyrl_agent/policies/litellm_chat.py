"""Hosted models through LiteLLM, at the chat level (evaluation, LLM judges, simulated users).

Retries only transient failures: rate limits (429), server errors (5xx), connection failures
and timeouts, with exponential backoff and jitter (:class:`~skyrl_agent.policies.retry.RetryPolicy`);
LiteLLM's own retries are turned off so there is one retry policy. Anything else (bad request,
authentication, unknown model) raises at once as a :class:`~skyrl_agent.policies.retry.PolicyError`.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Sequence
from typing import Any

from skyrl_agent.policies.retry import PolicyError, PolicyHTTPError, RetryPolicy, is_retryable_status
from skyrl_agent.types import SamplingParams

__all__ = ["LiteLLMChat"]


class LiteLLMChat:
    """A :class:`~skyrl_agent.types.ChatModel` over ``litellm.acompletion``.

    Args:
        model: a LiteLLM model name (``"openai/gpt-4o-mini"``, ``"anthropic/..."``).
        api_base: server URL for self-hosted OpenAI-compatible servers.
        api_key: the key; default: LiteLLM reads the provider's environment variable.
        timeout_s: deadline of one call.
        retry: the retry policy for transient failures.
        max_concurrency: most calls in flight.
        seed: seeds the backoff jitter.
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        retry: RetryPolicy | None = None,
        max_concurrency: int = 16,
        seed: int = 0,
    ) -> None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-map download
        from skyrl_gym.errors import require

        self._litellm: Any = require("litellm", "litellm", "hosted models through LiteLLM")
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.max_concurrency = max_concurrency
        self._rng = random.Random(seed)
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.attempts = 0

    def _retryable(self, exc: BaseException) -> bool:
        lit = self._litellm
        if isinstance(exc, (lit.APIConnectionError, lit.Timeout)):
            return True
        status = getattr(exc, "status_code", None)
        return isinstance(status, int) and is_retryable_status(status)

    async def chat(self, messages: Sequence[dict[str, Any]], sampling: SamplingParams | None = None) -> str:
        """The reply text; retries transient failures, raises ``PolicyError`` otherwise."""
        sampling = sampling or SamplingParams()
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:
            self._slots, self._loop = asyncio.Semaphore(self.max_concurrency), loop
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "timeout": self.timeout_s,
            "num_retries": 0,
        }
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.api_key:
            kwargs["api_key"] = self.api_key
        last: BaseException | None = None
        for attempt in range(1, self.retry.max_attempts + 1):
            async with self._slots:
                self.attempts += 1
                try:
                    resp = await self._litellm.acompletion(**kwargs)
                    return resp.choices[0].message.content or ""
                except Exception as exc:  # noqa: BLE001 - classified below
                    if not self._retryable(exc):
                        status = getattr(exc, "status_code", None)
                        if isinstance(status, int):
                            raise PolicyHTTPError(status, str(exc)[:500]) from exc
                        refused = PolicyError(f"{type(exc).__name__}: {exc}")
                        refused.retriable = False  # the same request fails the same way again
                        raise refused from exc
                    last = exc
            if attempt < self.retry.max_attempts:
                await asyncio.sleep(self.retry.delay(attempt, self._rng))
        raise PolicyError(
            f"gave up after {self.retry.max_attempts} attempts: {type(last).__name__}: {last}"
        ) from last
