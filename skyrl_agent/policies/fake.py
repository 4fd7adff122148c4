"""Scripted policies for tests and benchmarks (no model): replies come from a script.

:class:`ScriptedPolicy` answers each request with text from a list or a function of the context,
tokenized with a real tokenizer, so the agent loop sees real token ids. ``latency_s`` makes each
call sleep (asynchronously, so concurrent calls overlap as on a batching server): with an
instant env the ideal throughput of ``C`` concurrent episodes is ``C / latency_s`` turns a
second, which ``bench/bench_rollout.py`` measures against.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from skyrl_agent.types import FinishReason, GenerateOutput, GenerateRequest

__all__ = ["ScriptedPolicy"]

#: A reply script: a list of texts used in turn (cycling), or ``f(prompt_ids, call_index) -> str``.
Script = Sequence[str] | Callable[[Sequence[int], int], str]


class ScriptedPolicy:
    """Replies from a script; each reply ends with the tokenizer's EOS token unless
    ``add_eos=False``. Logprobs are a constant ``logprob`` per token.

    ``fail_on`` lists call indices (0-based, over all requests) that raise ``RuntimeError``,
    to test how the loop treats policy failures.
    """

    def __init__(
        self,
        tokenizer: Any,
        script: Script,
        *,
        latency_s: float = 0.0,
        add_eos: bool = True,
        logprob: float = -0.5,
        fail_on: Sequence[int] = (),
    ) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.latency_s = latency_s
        self.add_eos = add_eos
        self.logprob = logprob
        self.fail_on = set(fail_on)
        self.calls = 0
        self.requests: list[GenerateRequest] = []
        self._cache: dict[str, list[int]] = {}
        self._eos = tokenizer.eos_token_id

    def _reply(self, prompt_ids: Sequence[int], index: int) -> str:
        if callable(self.script):
            return self.script(prompt_ids, index)
        return self.script[index % len(self.script)]

    def _encode(self, text: str) -> list[int]:
        ids = self._cache.get(text)
        if ids is None:
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            self._cache[text] = ids
        return ids

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        """Reply to each request after ``latency_s``."""
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        outs = []
        for req in requests:
            index = self.calls
            self.calls += 1
            self.requests.append(req)
            if index in self.fail_on:
                raise RuntimeError(f"scripted policy failure at call {index}")
            text = self._reply(req.prompt_ids, index)
            ids = list(self._encode(text))
            finish = FinishReason.STOP
            if self.add_eos and self._eos is not None:
                ids.append(self._eos)
            max_tokens = req.sampling.max_tokens
            if len(ids) > max_tokens:
                ids, finish = ids[:max_tokens], FinishReason.LENGTH
                text = self.tokenizer.decode(ids, skip_special_tokens=False)
            outs.append(
                GenerateOutput(
                    token_ids=ids,
                    logprobs=[self.logprob] * len(ids) if req.sampling.logprobs else None,
                    finish_reason=finish,
                    text=text,
                    matched_stop=ids[-1] if finish == FinishReason.STOP and self.add_eos else None,
                )
            )
        return outs
