"""Retries for remote policies: transient failures only, exponential backoff with jitter.

Retried: HTTP 429 (rate limited), 5xx (server errors) and connection failures (refused,
reset, timed out). Not retried: other 4xx (a bad request stays bad; the message is raised at
once). A ``Retry-After`` header, when a server sends one, is honoured up to ``max_delay_s``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from skyrl_gym.errors import InfrastructureError

__all__ = ["RetryPolicy", "PolicyError", "PolicyHTTPError", "is_retryable_status"]


class PolicyError(InfrastructureError):
    """A policy could not produce a generation (after retries, where they apply): an
    infrastructure failure, so a policy called from inside a tool (a sub-agent) masks the
    episode instead of showing the model an error."""


class PolicyHTTPError(PolicyError):
    """A policy server answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        self.status, self.message = status, message
        super().__init__(f"HTTP {status}: {message}")

    def __reduce__(self):  # noqa: ANN204 - pickles with its fields
        return (self.__class__, (self.status, self.message))


def is_retryable_status(status: int) -> bool:
    """429 and 5xx are transient; other statuses are not retried."""
    return status == 429 or 500 <= status <= 599


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient failure."""

    max_attempts: int = 5
    """Attempts in all (1 means no retry)."""
    base_delay_s: float = 0.5
    """Delay before the first retry; doubles after each attempt."""
    max_delay_s: float = 20.0
    """Cap of one delay (and of a server's ``Retry-After``)."""
    jitter: float = 0.5
    """Each delay is drawn uniformly from ``[d * (1 - jitter), d]`` so clients do not retry in
    lockstep."""

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_delay_s)
        d = min(self.base_delay_s * 2 ** (attempt - 1), self.max_delay_s)
        return d * (1 - self.jitter * rng.random())
