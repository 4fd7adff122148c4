"""A client for a Search-R1-style retrieval server, with retries, backoff and a deadline.

The protocol (the ``/retrieve`` endpoint of Search-R1's ``retrieval_server.py``)::

    POST /retrieve   {"queries": ["q1", ...], "topk": 3, "return_scores": true}
    200              {"result": [[{"document": {"id": "12", "contents": "\\"Title\\"\\ntext"},
                                   "score": 0.83}, ...],      # one list per query, best first
                                 ...]}

With ``return_scores`` false a server answers bare documents (``[[{"id", "contents"}, ...]]``);
both shapes are read. ``contents`` is the title, a newline, then the text (the title may be quoted).

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
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from skyrl_gym.envs.search.types import Passage, RemoteRetrieverConfig, RetrievalError, SearchHit

__all__ = ["RemoteRetriever", "parse_response"]


def _passage(doc: Any, fallback_id: str) -> Passage:
    if not isinstance(doc, dict):
        raise ValueError(f"a document must be an object, got {type(doc).__name__}")
    if "contents" in doc:
        title, _, text = str(doc["contents"]).partition("\n")
        return Passage(id=str(doc.get("id", fallback_id)), title=title.strip().strip('"'), text=text.strip())
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
        cfg = self.config
        payload = json.dumps({"queries": list(queries), "topk": int(topk), "return_scores": True}).encode()
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
            try:
                return self._post(payload, min(cfg.timeout_s, remaining), len(queries))
            except _Retryable as exc:
                why, last_status = str(exc), exc.status
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
            self.config.url, data=payload, method="POST", headers={"Content-Type": "application/json"}
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
            raise RetrievalError(
                f"retrieval server {self.config.url} rejected the request with HTTP {status} "
                f"(not retried): {detail}",
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
