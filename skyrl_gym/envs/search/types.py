"""Data types of the search env: passages, hits, retriever configs, the retriever protocol."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from skyrl_gym.errors import SkyRLError

__all__ = [
    "Passage",
    "SearchHit",
    "BM25Config",
    "RemoteRetrieverConfig",
    "Retriever",
    "RetrieverKind",
    "RetrievalError",
]

#: Where passages come from: the local BM25 index or a Search-R1-style HTTP server.
RetrieverKind = Literal["bm25", "remote"]


@dataclass(frozen=True)
class Passage:
    """One document of a corpus."""

    id: str
    """Stable identifier (unique within the corpus)."""
    title: str
    """Short title, shown to the model as ``Doc i(Title: ...)``."""
    text: str
    """The passage body."""


@dataclass(frozen=True)
class SearchHit:
    """A passage returned for a query, with its retrieval score (higher is better)."""

    passage: Passage
    """The passage."""
    score: float
    """The retriever's score; only the order matters, scales differ between retrievers."""


@dataclass(frozen=True)
class BM25Config:
    """Okapi BM25 parameters of the local index."""

    k1: float = 1.2
    """Term-frequency saturation: 0 ignores repetitions, larger values reward them longer."""
    b: float = 0.75
    """Length normalization: 0 ignores document length, 1 normalizes fully."""

    def __post_init__(self) -> None:
        from skyrl_gym.errors import ConfigError

        if self.k1 < 0:
            raise ConfigError(f"bm25 k1 must be >= 0, got {self.k1}")
        if not 0.0 <= self.b <= 1.0:
            raise ConfigError(f"bm25 b must be in [0, 1], got {self.b}")


@dataclass(frozen=True)
class RemoteRetrieverConfig:
    """A client for a Search-R1-style retrieval server (``POST /retrieve``)."""

    url: str = "http://127.0.0.1:8000/retrieve"
    """Full URL of the ``/retrieve`` endpoint."""
    timeout_s: float = 10.0
    """Deadline of one HTTP request (connect plus read), seconds."""
    max_retries: int = 5
    """Retries after the first attempt, on 5xx, 429, connection errors and timeouts only."""
    backoff_s: float = 0.5
    """First backoff; doubles on each retry (full jitter: the wait is uniform in [0, backoff])."""
    max_backoff_s: float = 8.0
    """Cap on one backoff."""
    deadline_s: float = 60.0
    """Overall deadline of one ``search`` call, retries and waits included."""

    def __post_init__(self) -> None:
        from skyrl_gym.errors import ConfigError

        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(
                f"search_url must be an http(s) URL such as http://127.0.0.1:8000/retrieve, got {self.url!r}"
            )
        if self.timeout_s <= 0 or self.deadline_s <= 0:
            raise ConfigError("timeout_s and deadline_s must be > 0")
        if self.max_retries < 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ConfigError("max_retries, backoff_s and max_backoff_s must be >= 0")


@runtime_checkable
class Retriever(Protocol):
    """Anything that answers a batch of queries with ranked passages."""

    def search(self, queries: Sequence[str], topk: int) -> list[list[SearchHit]]:
        """The ``topk`` best hits for each query, best first (fewer when fewer match)."""
        ...


class RetrievalError(SkyRLError, RuntimeError):
    """The retrieval server failed after retries (an infrastructure failure, never a reward of 0).

    ``env.step`` raises it so that the runtime records the failure and masks the episode."""

    def __init__(self, message: str, attempts: int = 0, last_status: int | None = None) -> None:
        super().__init__(message)
        self.attempts, self.last_status = attempts, last_status

    def __reduce__(self):  # noqa: ANN204 - pickles with its fields
        return (self.__class__, (self.args[0], self.attempts, self.last_status))
