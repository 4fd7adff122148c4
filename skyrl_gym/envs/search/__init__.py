"""``search``: multi-turn retrieval QA (``<search>``/``<information>``/``<answer>``, exact match).

Retrieval runs on a local BM25 index over a bundled corpus (no dependency) or on a
Search-R1-style HTTP server (:class:`RemoteRetriever`, retries with backoff and a deadline).
"""

from skyrl_gym.envs.search.bm25 import BM25Index, load_passages, tokenize
from skyrl_gym.envs.search.data import bundled_passages, load_bundled_rows, make_row
from skyrl_gym.envs.search.env import SearchEnv, exact_match, format_hits, format_published, normalize_answer
from skyrl_gym.envs.search.remote import RemoteRetriever, parse_response
from skyrl_gym.envs.search.types import (
    BM25Config,
    Passage,
    RemoteRetrieverConfig,
    RetrievalError,
    Retriever,
    SearchConfig,
    SearchHit,
)

__all__ = [
    "BM25Config",
    "BM25Index",
    "Passage",
    "RemoteRetriever",
    "RemoteRetrieverConfig",
    "RetrievalError",
    "Retriever",
    "SearchConfig",
    "SearchEnv",
    "SearchHit",
    "bundled_passages",
    "exact_match",
    "format_hits",
    "format_published",
    "load_bundled_rows",
    "load_passages",
    "make_row",
    "normalize_answer",
    "parse_response",
    "tokenize",
]
