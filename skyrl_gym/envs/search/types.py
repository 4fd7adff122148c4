"""Data types of the search env: passages, hits, retriever configs, the retriever protocol."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from skyrl_gym.config import config_items, without_env_class
from skyrl_gym.errors import ConfigError, InfrastructureError, did_you_mean

__all__ = [
    "Passage",
    "SearchHit",
    "BM25Config",
    "RemoteRetrieverConfig",
    "SearchConfig",
    "SearchEnvConfig",
    "Retriever",
    "RetrieverKind",
    "RequestFormat",
    "ObservationFormat",
    "RetrievalError",
]

#: Where passages come from: the local BM25 index or a Search-R1-style HTTP server.
RetrieverKind = Literal["bm25", "remote"]
#: The body of a ``/retrieve`` request: ``queries`` (a list, Search-R1's server) or ``query``
#: (one string per request, the published skyrl-gym client and SkyRL's retrieval server).
RequestFormat = Literal["queries", "query"]
#: What a search observation holds between ``<information>`` and ``</information>``:
#: ``passages`` (``Doc 1(Title: T) text`` lines) or ``published`` (the published skyrl-gym
#: env's JSON object ``{"result": "Doc 1: contents\n..."}``).
ObservationFormat = Literal["passages", "published"]


@dataclass(frozen=True)
class Passage:
    """One document of a corpus."""

    id: str
    """Stable identifier (unique within the corpus)."""
    title: str
    """Short title, shown to the model as ``Doc i(Title: ...)``."""
    text: str
    """The passage body."""
    contents: str | None = field(default=None, compare=False)
    """The Search-R1 ``contents`` string it was read from (the title line, then the text), when
    it came from one (a retrieval server, a Search-R1 corpus file); the published observation
    format shows it as it is."""

    def search_r1_contents(self) -> str:
        """``contents`` when known, else Search-R1's layout: the quoted title, a newline, the text."""
        return self.contents if self.contents is not None else f'"{self.title}"\n{self.text}'


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
    request_format: RequestFormat = "queries"
    """``queries``: one request for a batch, ``{"queries": [...], "topk", "return_scores"}``
    (Search-R1's server). ``query``: one request per query, ``{"query": "...", "topk",
    "return_scores"}`` (the published skyrl-gym client; SkyRL's retrieval server). Either way the
    answer is ``{"result": [[hit, ...], ...]}``, one list per query."""
    log_requests: bool = False
    """Log each attempt and its outcome at INFO level (logger ``skyrl_gym.envs.search.remote``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise ConfigError(
                f"search_url must be an http(s) URL such as http://127.0.0.1:8000/retrieve, got {self.url!r}"
            )
        if self.timeout_s <= 0 or self.deadline_s <= 0:
            raise ConfigError("timeout_s and deadline_s must be > 0")
        if self.max_retries < 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ConfigError("max_retries, backoff_s and max_backoff_s must be >= 0")
        if self.request_format not in ("queries", "query"):
            raise ConfigError(f"request_format must be 'queries' or 'query', got {self.request_format!r}")
        if not isinstance(self.log_requests, bool):
            raise ConfigError(f"log_requests must be true or false, got {self.log_requests!r}")


#: Keys every search config may set.
_COMMON_KEYS = (
    "retriever",
    "topk",
    "max_turns",
    "max_query_chars",
    "max_passage_chars",
    "observation_format",
)
#: Keys of the local BM25 retriever only.
_BM25_KEYS = ("corpus_path", "bm25_k1", "bm25_b")
#: Keys of the remote retriever only (``timeout`` is the published name of ``timeout_s``).
_REMOTE_KEYS = (
    "search_url",
    "timeout",
    "timeout_s",
    "max_retries",
    "backoff_s",
    "max_backoff_s",
    "deadline_s",
    "request_format",
    "log_requests",
)
_PUBLISHED_TIMEOUT_S = 30.0


def _number(items: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    value = items.get(key)
    if value is None:
        return default
    try:
        if isinstance(value, bool):
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"search {key} must be a number, got {value!r}") from None


@dataclass
class SearchEnvConfig:
    """The published skyrl-gym ``SearchEnvConfig``: its four keys and their defaults.

    Passed as ``env_config`` it selects published-compatible mode (see :class:`SearchConfig`):
    the retrieval server at ``search_url``. For the bundled local index, pass no config (or a
    dict without ``search_url``) instead."""

    log_requests: bool = False
    """Log each request to the retriever (logger ``skyrl_gym.envs.search.remote``)."""
    search_url: str = "http://127.0.0.1:8000/retrieve"
    """The retrieval server's ``/retrieve`` endpoint."""
    topk: int = 3
    """Passages per search."""
    timeout: int = 30
    """Seconds per request."""


@dataclass(frozen=True)
class SearchConfig:
    """Env-wide settings of ``search`` (``env_config``), read by :meth:`from_env_config`.

    **Published-compatible mode.** A config that sets ``search_url`` and no ``retriever`` (as
    every published skyrl-gym config does: ``search_url``, ``topk``, ``timeout``,
    ``log_requests``) selects the remote retriever and the published behaviour: one
    ``{"query": ...}`` request per search, a 30 s request ``timeout``, no cut of passages, and
    the published observation (``<information>{"result": "Doc 1: ..."}</information>``). Any
    of these can still be set explicitly."""

    retriever: RetrieverKind = "bm25"
    """``bm25`` (a local index over the bundled corpus or ``corpus_path``) or ``remote`` (a
    Search-R1-style server at ``search_url``)."""
    topk: int = 3
    """Passages per search."""
    max_turns: int = 3
    """Turns per episode when the row has no ``max_turns`` (a row's value wins)."""
    corpus_path: str | None = None
    """JSONL corpus of the BM25 index; None: the bundled corpus."""
    bm25: BM25Config = field(default_factory=BM25Config)
    """BM25 parameters (keys ``bm25_k1`` and ``bm25_b``)."""
    remote: RemoteRetrieverConfig | None = None
    """The remote client's settings (``retriever="remote"`` only)."""
    max_query_chars: int = 500
    """A query is cut to this many characters before it is sent."""
    max_passage_chars: int | None = 800
    """Characters of one passage in an observation; None: no cut (the published-mode default)."""
    observation_format: ObservationFormat = "passages"
    """How hits are shown (see :data:`ObservationFormat`)."""
    published: bool = False
    """True when the config was recognised as a published skyrl-gym config (see above)."""

    def __post_init__(self) -> None:
        if self.retriever not in ("bm25", "remote"):
            raise ConfigError(f"unknown retriever {self.retriever!r}; use 'bm25' or 'remote'")
        if self.retriever == "remote" and self.remote is None:
            raise ConfigError("retriever='remote' needs a RemoteRetrieverConfig (search_url...)")
        if self.topk < 1:
            raise ConfigError(f"search topk must be >= 1, got {self.topk}")
        if self.max_turns < 1:
            raise ConfigError(f"search max_turns must be >= 1, got {self.max_turns}")
        if self.max_query_chars < 1 or (self.max_passage_chars is not None and self.max_passage_chars < 1):
            raise ConfigError("search max_query_chars and max_passage_chars must be >= 1")
        if self.observation_format not in ("passages", "published"):
            raise ConfigError(
                f"observation_format must be 'passages' or 'published', got {self.observation_format!r}"
            )

    @classmethod
    def from_env_config(cls, env_config: Any) -> SearchConfig:
        """Read a dict, an OmegaConf ``DictConfig`` or a dataclass (such as the published
        ``SearchEnvConfig``). An unknown key, or a key of the other retriever, raises
        :class:`ConfigError` with the closest known key."""
        items = without_env_class(config_items(env_config, "search env_config"), "search")
        known = (*_COMMON_KEYS, *_BM25_KEYS, *_REMOTE_KEYS)
        for key in items:
            if key not in known:
                raise ConfigError(
                    f"unknown search env_config key {key!r}.{did_you_mean(key, known)} "
                    f"Known keys: {', '.join(sorted(known))}"
                )
        given = {k: v for k, v in items.items() if v is not None}
        published = "retriever" not in given and "search_url" in given
        retriever = str(given.get("retriever", "remote" if "search_url" in given else "bm25"))
        if retriever not in ("bm25", "remote"):
            raise ConfigError(f"unknown retriever {retriever!r}; use 'bm25' or 'remote'")
        other = _REMOTE_KEYS if retriever == "bm25" else _BM25_KEYS
        misplaced = [k for k in other if k in given]
        if misplaced:
            fix = (
                "set search_url to use a retrieval server, or drop them"
                if retriever == "bm25"
                else "they only apply to retriever='bm25'; drop them"
            )
            raise ConfigError(
                f"search env_config keys {misplaced} do not apply to retriever={retriever!r}: {fix}"
            )
        remote = None
        if retriever == "remote":
            if "timeout" in given and "timeout_s" in given:
                raise ConfigError("give one of timeout (the published name) and timeout_s, not both")
            timeout_key = "timeout" if "timeout" in given else "timeout_s"
            timeout_s = _number(
                given,
                timeout_key,
                float,
                _PUBLISHED_TIMEOUT_S if published else RemoteRetrieverConfig.timeout_s,
            )
            log_requests = given.get("log_requests", False)
            if isinstance(log_requests, str) and log_requests.lower() in ("true", "false"):
                log_requests = log_requests.lower() == "true"
            remote = RemoteRetrieverConfig(
                url=str(given.get("search_url", RemoteRetrieverConfig.url)),
                timeout_s=timeout_s,
                max_retries=_number(given, "max_retries", int, RemoteRetrieverConfig.max_retries),
                backoff_s=_number(given, "backoff_s", float, RemoteRetrieverConfig.backoff_s),
                max_backoff_s=_number(given, "max_backoff_s", float, RemoteRetrieverConfig.max_backoff_s),
                # one whole request always fits in the deadline, however long its timeout
                deadline_s=_number(
                    given, "deadline_s", float, max(RemoteRetrieverConfig.deadline_s, timeout_s)
                ),
                request_format=given.get("request_format", "query" if published else "queries"),
                log_requests=log_requests,
            )
        corpus = given.get("corpus_path")
        return cls(
            retriever=retriever,  # type: ignore[arg-type]
            topk=_number(given, "topk", int, 3),
            max_turns=_number(given, "max_turns", int, 3),
            corpus_path=None if corpus is None else str(corpus),
            bm25=BM25Config(
                k1=_number(given, "bm25_k1", float, 1.2), b=_number(given, "bm25_b", float, 0.75)
            ),
            remote=remote,
            max_query_chars=_number(given, "max_query_chars", int, 500),
            max_passage_chars=_number(given, "max_passage_chars", int, None if published else 800),
            observation_format=given.get("observation_format", "published" if published else "passages"),
            published=published,
        )


@runtime_checkable
class Retriever(Protocol):
    """Anything that answers a batch of queries with ranked passages."""

    def search(self, queries: Sequence[str], topk: int) -> list[list[SearchHit]]:
        """The ``topk`` best hits for each query, best first (fewer when fewer match)."""
        ...


class RetrievalError(InfrastructureError):
    """The retrieval server failed after retries (an infrastructure failure, never a reward of 0).

    ``env.step`` raises it (also from inside a tool: the executor re-raises an
    :class:`~skyrl_gym.errors.InfrastructureError`) so that the runtime records the failure and
    masks the episode."""

    def __init__(self, message: str, attempts: int = 0, last_status: int | None = None) -> None:
        super().__init__(message)
        self.attempts, self.last_status = attempts, last_status

    def __reduce__(self):  # noqa: ANN204 - pickles with its fields
        return (self.__class__, (self.args[0], self.attempts, self.last_status))
