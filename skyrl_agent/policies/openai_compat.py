"""A policy behind an OpenAI-compatible completions server (vLLM, SGLang, our own server).

Token ids go in as the ``prompt`` (a list of ints, which these servers accept). Token ids come
back from, in order of preference: the choice's ``token_ids`` field, ``logprobs.tokens`` written
as ``"token_id:N"`` (vLLM's ``return_tokens_as_token_ids``), or, when the server gives neither,
the returned text tokenized again. Only the first two are exact token-in token-out; the third is
marked by ``logprobs=None`` and a warning, since re-tokenized text may differ from what was
sampled. Logprobs are the server's per-token ``token_logprobs`` (vLLM's default
``raw_logprobs`` mode gives the raw model's, as :mod:`skyrl_agent.types` asks).

Transient failures are retried (see :mod:`skyrl_agent.policies.retry`); at most
``max_concurrency`` requests are in flight at once.
"""

from __future__ import annotations

import asyncio
import random
import warnings
from collections.abc import Sequence
from typing import Any

from skyrl_agent.policies.retry import PolicyError, PolicyHTTPError, RetryPolicy, is_retryable_status
from skyrl_agent.types import FinishReason, GenerateOutput, GenerateRequest

__all__ = ["OpenAICompatPolicy"]


class OpenAICompatPolicy:
    """Generate through ``POST {base_url}/completions``.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model's name.
        tokenizer: the served model's tokenizer (the runtime renders prompts with it).
        api_key: sent as a bearer token when given.
        timeout_s: deadline of one HTTP request.
        retry: retry policy for 429, 5xx and connection failures.
        max_concurrency: most requests in flight.
        seed: seeds the backoff jitter.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: Any,
        *,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        retry: RetryPolicy | None = None,
        max_concurrency: int = 64,
        seed: int = 0,
    ) -> None:
        from skyrl_gym.errors import require

        self._httpx: Any = require("httpx", "http", "talking to an OpenAI-compatible server")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tokenizer = tokenizer
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.max_concurrency = max_concurrency
        self._rng = random.Random(seed)
        self._slots: asyncio.Semaphore | None = None
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.attempts = 0

    def _session(self) -> tuple[Any, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:  # clients are bound to one event loop
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = self._httpx.AsyncClient(timeout=self.timeout_s, headers=headers)
            self._slots = asyncio.Semaphore(self.max_concurrency)
            self._loop = loop
        assert self._slots is not None
        return self._client, self._slots

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        """One HTTP request per generation, concurrently."""
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    def _body(self, req: GenerateRequest) -> dict[str, Any]:
        sp = req.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(req.prompt_ids),
            "max_tokens": sp.max_tokens,
            "temperature": sp.temperature,
            "top_p": sp.top_p,
            "logprobs": sp.top_logprobs if sp.logprobs or sp.top_logprobs else None,
            # vLLM/SGLang extensions; servers that do not know them ignore them
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
        }
        if sp.top_k:
            body["top_k"] = sp.top_k
        if sp.stop:
            body["stop"] = list(sp.stop)
        if sp.stop_token_ids:
            body["stop_token_ids"] = list(sp.stop_token_ids)
        if sp.ignore_eos:
            body["ignore_eos"] = True  # vLLM/SGLang
        if sp.seed is not None:
            body["seed"] = sp.seed
        return {k: v for k, v in body.items() if v is not None}

    async def _one(self, req: GenerateRequest) -> GenerateOutput:
        client, slots = self._session()
        body = self._body(req)
        httpx = self._httpx
        last: Exception | None = None
        for attempt in range(1, self.retry.max_attempts + 1):
            retry_after = None
            async with slots:
                self.attempts += 1
                try:
                    resp = await client.post(f"{self.base_url}/completions", json=body)
                except (
                    httpx.TransportError,
                    httpx.TimeoutException,
                ) as exc:  # connection refused/reset, timeouts
                    last = PolicyError(f"{type(exc).__name__}: {exc} ({self.base_url})")
                else:
                    if resp.status_code == 200:
                        return self._parse(resp.json(), req)
                    err = PolicyHTTPError(resp.status_code, resp.text[:500])
                    if not is_retryable_status(resp.status_code):
                        raise err
                    last = err
                    header = resp.headers.get("retry-after")
                    if header is not None:
                        try:
                            retry_after = float(header)
                        except ValueError:
                            retry_after = None
            if attempt < self.retry.max_attempts:
                await asyncio.sleep(self.retry.delay(attempt, self._rng, retry_after))
        assert last is not None
        raise PolicyError(f"gave up after {self.retry.max_attempts} attempts: {last}") from last

    def _parse(self, data: dict[str, Any], req: GenerateRequest) -> GenerateOutput:
        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError) as exc:
            raise PolicyError(f"server reply has no choices: {str(data)[:300]}") from exc
        text = choice.get("text") or ""
        lp = choice.get("logprobs") or {}
        logprobs = lp.get("token_logprobs")
        ids = choice.get("token_ids")
        if ids is None:
            tokens = lp.get("tokens") or []
            if tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
                ids = [int(t.split(":", 1)[1]) for t in tokens]
        if ids is None:
            warnings.warn(
                "the server returned no token ids; the text is tokenized again, which may differ "
                "from what was sampled (serve with vLLM's return_tokens_as_token_ids)",
                stacklevel=2,
            )
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            logprobs = None
        ids = [int(t) for t in ids]
        if logprobs is not None:
            logprobs = [float(x) if x is not None else 0.0 for x in logprobs]
            if len(logprobs) != len(ids) or not req.sampling.logprobs:
                logprobs = None
        tops = None
        if req.sampling.top_logprobs and ids is not None:
            tops = _top_logprobs(lp.get("top_logprobs"), len(ids))
        reason = choice.get("finish_reason")
        finish = (
            FinishReason.LENGTH
            if reason == "length"
            else FinishReason.STOP
            if reason == "stop"
            else FinishReason.ABORT
        )
        stop_reason = choice.get("stop_reason")
        return GenerateOutput(
            token_ids=ids,
            logprobs=logprobs,
            finish_reason=finish,
            text=text,
            matched_stop=stop_reason if isinstance(stop_reason, (str, int)) else None,
            top_logprobs=tops,
        )

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _top_logprobs(rows: Any, n: int) -> list[list[tuple[int, float]]] | None:
    """``logprobs.top_logprobs`` of a completions reply (one ``{token: logprob}`` per token) as
    ``(token_id, logprob)`` pairs, most likely first; None unless every key is a ``token_id:N``
    (vLLM's ``return_tokens_as_token_ids``), since token texts are not ids."""
    if not isinstance(rows, list) or len(rows) != n:
        return None
    out = []
    for row in rows:
        if not isinstance(row, dict):
            return None
        pairs = []
        for key, value in row.items():
            if not (isinstance(key, str) and key.startswith("token_id:")) or value is None:
                return None
            pairs.append((int(key.split(":", 1)[1]), float(value)))
        out.append(sorted(pairs, key=lambda p: -p[1]))
    return out
