"""A small Okapi BM25 index in pure Python (no dependency), good for corpora up to ~100k passages.

Scoring, for a query ``q`` and a document ``d`` of length ``|d|``::

    score(q, d) = sum over distinct terms t of q:
        idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

(the Lucene form of the idf, which stays positive for terms in more than half the documents).
Tokens are lowercase runs of letters and digits, minus a short English stopword list. Ties are
broken by corpus order, so results are deterministic.
"""

from __future__ import annotations

import heapq
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from skyrl_gym.envs.search.types import BM25Config, Passage, SearchHit

__all__ = ["BM25Index", "tokenize", "load_passages"]

_TOKEN_RE = re.compile(r"[^\W_]+")
_STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have he her his how in is it its of on "
    "or she that the their they this to was were what when where which who whom whose why will "
    "with".split()
)
MAX_QUERY_CHARS = 2000
"""Queries are cut to this many characters before tokenizing (a 1 MB query costs no more)."""


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens without stopwords."""
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in _STOPWORDS]


def load_passages(path: str | Path) -> list[Passage]:
    """Passages from a JSONL file with ``id``, ``title`` and ``text`` per line.

    A Search-R1 corpus line (``{"id": ..., "contents": "Title\\ntext"}``) is accepted too."""
    passages = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            contents = None
            if "contents" in row and "text" not in row:
                contents = str(row["contents"])
                title, _, text = contents.partition("\n")
                row = {"id": row.get("id", str(n)), "title": title.strip('"'), "text": text}
            try:
                passages.append(
                    Passage(
                        id=str(row["id"]), title=str(row["title"]), text=str(row["text"]), contents=contents
                    )
                )
            except KeyError as exc:
                from skyrl_gym.errors import ConfigError

                raise ConfigError(
                    f"{path}:{n}: a corpus line needs 'id', 'title' and 'text' (missing {exc})"
                ) from None
    return passages


class BM25Index:
    """An in-memory inverted index over passages (title and text are indexed together)."""

    def __init__(self, passages: Iterable[Passage], config: BM25Config | None = None) -> None:
        self.config = config or BM25Config()
        self.passages: list[Passage] = list(passages)
        self._postings: dict[str, list[tuple[int, int]]] = {}
        self._lengths: list[int] = []
        for i, p in enumerate(self.passages):
            counts = Counter(tokenize(f"{p.title} {p.text}"))
            self._lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                self._postings.setdefault(term, []).append((i, tf))
        n = len(self.passages)
        self._avgdl = (sum(self._lengths) / n) if n else 0.0
        self._idf = {
            t: math.log(1.0 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self._postings.items()
        }

    def __len__(self) -> int:
        return len(self.passages)

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every passage that shares a term with ``query`` (by passage index)."""
        k1, b = self.config.k1, self.config.b
        out: dict[int, float] = {}
        for term in dict.fromkeys(tokenize(query[:MAX_QUERY_CHARS])):
            postings = self._postings.get(term)
            if not postings:
                continue
            idf = self._idf[term]
            for i, tf in postings:
                norm = k1 * (1.0 - b + b * self._lengths[i] / self._avgdl)
                out[i] = out.get(i, 0.0) + idf * tf * (k1 + 1.0) / (tf + norm)
        return out

    def search(self, queries: Sequence[str], topk: int) -> list[list[SearchHit]]:
        """The ``topk`` best passages for each query (only passages sharing a term with it)."""
        results = []
        for query in queries:
            scored = self.scores(query)
            best = heapq.nsmallest(topk, scored.items(), key=lambda kv: (-kv[1], kv[0]))
            results.append([SearchHit(self.passages[i], s) for i, s in best])
        return results
