"""A client for a Search-R1-style retrieval server, with retries, backoff and a deadline.

The protocol (the ``/retrieve`` endpoint), in one of two request formats
(``RemoteRetrieverConfig.request_format``)::

    POST /retrieve   {"queries": ["q1", ...], "topk": 3, "return_scores": true}   # "queries": Search-R1
    POST /retrieve   {"query": "q1", "topk": 3, "return_scores": true}            # "query": published skyrl-gym
    200              {"result": [[{"document": {"id": "12", "contents": "\\"Title\\"\\ntext"},
                                   "score": 0.83}, ...],      # one list per query, best first
                                 ...]}

With ``query``, each query is one request and its answer holds one list. With ``return_scores``
false a server answers bare documents (``[[{"id", "contents"}, ...]]``); both shapes are read.
``contents`` is the title, a newline, then the text (the title may be quoted); it is also kept
as it came (``Passage.contents``).

Failures: 5xx, 429, connection errors and timeouts are retried with exponential backoff and full
jitter (wait uniform in ``[0, min(max_backoff_s, backoff_s * 2**attempt)]``), within an overall
deadline. Other 4xx answers (a malformed request) and unreadable bodies are not retried. When
nothing worked, :class:`RetrievalError` is raised: an infrastructure failure that the env passes
on, so the runtime masks the episode instead of training on a reward of 0. Only the standard
library is used (``urllib.request``).
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from skyrl_gym.envs.search.types import Passage, RemoteRetrieverConfig, RetrievalError, SearchHit

__all__ = ["RemoteRetriever", "parse_response"]

logger = logging.getLogger(__name__)


def _passage(doc: Any, fallback_id: str) -> Passage:
    if not isinstance(doc, dict):
        raise ValueError(f"a document must be an object, got {type(doc).__name__}")
    if "contents" in doc:
        contents = str(doc["contents"])
        title, _, text = contents.partition("\n")
        return Passage(
            id=str(doc.get("id", fallback_id)),
            title=title.strip().strip('"'),
            text=text.strip(),
            contents=contents,
        )
    if "text" in doc:
        return Passage(
            id=str(doc.get("id", fallback_id)), title=str(doc.get("title", "")), text=str(doc["text"])
        )
    raise ValueError("a document needs 'contents' (Search-R1) or 'text'")


def parse_response(body: Any, n_queries: int) -> list[list[SearchHit]]:
    """Hits from a ``/retrieve`` response body; raises ``ValueError`` on an unexpected shape."""
    if not isinstance(body, dict) or not isinstance(body.get("result"), list):
        raise ValueError("the response has no 'result' list")
    result = body["result"]
    if len(result) != n_queries:
        raise ValueError(f"asked {n_queries} queries, got {len(result)} result lists")
    out = []
    for q, items in enumerate(result):
        if not isinstance(items, list):
            raise ValueError(f"result {q} is not a list")
        hits = []
        for rank, item in enumerate(items):
            if isinstance(item, dict) and "document" in item:
                hits.append(
                    SearchHit(_passage(item["document"], f"{q}-{rank}"), float(item.get("score", 0.0)))
                )
            else:
                hits.append(SearchHit(_passage(item, f"{q}-{rank}"), float(-rank)))
        out.append(hits)
    return out


class _Retryable(Exception):
    def __init__(self, why: str, status: int | None = None) -> None:
        super().__init__(why)
        self.status = status


class RemoteRetriever:
    """``Retriever`` backed by a Search-R1-style HTTP server (see the module docstring)."""

    def __init__(
        self,
        config: RemoteRetrieverConfig | None = None,
        *,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config or RemoteRetrieverConfig()
        self._rng = rng or random.Random()
        self._sleep = sleep
        self.attempts = 0
        """HTTP attempts made by this client (all calls)."""
        self.retries = 0
        """Attempts that were retries (all calls)."""

    def search(self, queries: Sequence[str], topk: int) -> list[list[SearchHit]]:
        """POST the queries; retry transient failures; raise :class:`RetrievalError` at the end."""
        if self.config.request_format == "query":
            return [
                self._call({"query": str(q), "topk": int(topk), "return_scores": True}, 1)[0] for q in queries
            ]
        return self._call(
            {"queries": [str(q) for q in queries], "topk": int(topk), "return_scores": True}, len(queries)
        )

    def _call(self, body: dict[str, Any], n_lists: int) -> list[list[SearchHit]]:
        """One logical request (``n_lists`` result lists expected), with its retries."""
        cfg = self.config
        payload = json.dumps(body).encode()
        start = time.monotonic()
        last_status: int | None = None
        why = ""
        attempt = 0
        while True:
            remaining = cfg.deadline_s - (time.monotonic() - start)
            if remaining <= 0:
                break
            self.attempts += 1
            attempt += 1
            if cfg.log_requests:
                logger.info(
                    "retrieval attempt %d: POST %s %s",
                    attempt,
                    cfg.url,
                    payload[:300].decode("utf-8", "replace"),
                )
            try:
                hits = self._post(payload, min(cfg.timeout_s, remaining), n_lists)
            except _Retryable as exc:
                why, last_status = str(exc), exc.status
                if cfg.log_requests:
                    logger.info("retrieval attempt %d failed: %s", attempt, why)
            else:
                if cfg.log_requests:
                    logger.info("retrieval attempt %d: %d hit(s)", attempt, sum(len(h) for h in hits))
                return hits
            if attempt > cfg.max_retries:
                break
            cap = min(cfg.max_backoff_s, cfg.backoff_s * (2 ** (attempt - 1)))
            wait = self._rng.uniform(0.0, cap)
            remaining = cfg.deadline_s - (time.monotonic() - start)
            if wait >= remaining:
                break
            self._sleep(wait)
            self.retries += 1
        raise RetrievalError(
            f"retrieval server {cfg.url} failed after {attempt} attempt(s) in "
            f"{time.monotonic() - start:.1f}s: {why or 'deadline reached'}",
            attempt,
            last_status,
        )

    def _post(self, payload: bytes, timeout: float, n_queries: int) -> list[list[SearchHit]]:
        request = urllib.request.Request(
            self.config.url,
            data=payload,
            method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            status = exc.code
            detail = exc.read(300).decode("utf-8", "replace") if exc.fp is not None else ""
            exc.close()
            if status >= 500 or status == 429:
                raise _Retryable(f"HTTP {status}", status) from None
            hint = ""
            if status in (400, 422):
                other = "queries" if self.config.request_format == "query" else "query"
                hint = (
                    f" (if the server expects {{{other!r}: ...}} requests, set request_format={other!r}; "
                    f"now {self.config.request_format!r})"
                )
            raise RetrievalError(
                f"retrieval server {self.config.url} rejected the request with HTTP {status} "
                f"(not retried): {detail}{hint}",
                1,
                status,
            ) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:  # timeouts are OSErrors
            reason = getattr(exc, "reason", exc)
            raise _Retryable(f"{type(reason).__name__}: {reason}") from None
        try:
            return parse_response(json.loads(raw), n_queries)
        except (ValueError, TypeError) as exc:
            raise RetrievalError(
                f"retrieval server {self.config.url} sent an unreadable response: {exc}"
            ) from None
