"""The static micro-batcher: the baseline the inference engine is measured and checked against.

Before the continuous-batching engine (:mod:`skyrl_agent.policies._engine`), ``HFPolicy``
gathered concurrent ``generate`` calls into batches: requests that arrive within
``batch_wait_s`` of each other, up to ``max_batch_size``, run as one left-padded batch until its
last row ends (rows leave the batch as they finish; nothing is reused across turns). It lives
here, out of the product, as ``bench/bench_generation.py``'s ``static`` variant and as the tests'
plain reference decode: one request at a time (``max_batch_size=1``) it is the textbook loop
the engine's exactness is checked against.

A request fails alone: one that cannot run is refused before it joins a batch
(:func:`skyrl_agent.policies.hf.check_request`), and when a batch fails anyway its rows are run
again one by one, so only the request at fault gets the error.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from skyrl_agent.models import bf16_autocast, cache_kwarg, output_cache
from skyrl_agent.policies import _sampling
from skyrl_agent.policies.hf import check_request, eos_and_pad
from skyrl_agent.types import FinishReason, GenerateOutput, GenerateRequest, SamplingParams
from skyrl_gym.errors import ConfigError

__all__ = ["StaticBatchPolicy"]

log = logging.getLogger(__name__)


class StaticBatchPolicy:
    """Batched sampling from a local causal LM, one left-padded batch at a time.

    Args:
        model: a transformers causal LM.
        tokenizer: its tokenizer.
        max_batch_size: most rows in one model call.
        batch_wait_s: how long the micro-batcher waits for more requests before a batch starts.
        seed: seeds the generator used by requests without their own seed.
        autocast_bf16: run the model under bf16 autocast (logits back in float32 to sample).
        min_shared_prefix: prompts of one batch that share at least this many leading tokens
            have that prefix computed once (:func:`skyrl_agent.policies._sampling.prefill`).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch_size: int = 32,
        batch_wait_s: float = 0.005,
        seed: int = 0,
        autocast_bf16: bool = False,
        min_shared_prefix: int = 16,
    ) -> None:
        if max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.autocast_bf16 = autocast_bf16
        self.min_shared_prefix = min_shared_prefix
        self.device = next(model.parameters()).device
        self.eos_token_ids, self.pad_token_id = eos_and_pad(model, tokenizer)
        self.weights_version = 0
        self._cache_kwarg = cache_kwarg(model)
        self._vocab_size = int(model.get_input_embeddings().num_embeddings)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()  # one batch or weight update at a time
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="static-policy")
        self._pending: list[tuple[GenerateRequest, asyncio.Future[GenerateOutput]]] = []
        self._worker: asyncio.Task[None] | None = None

    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        """Generate for ``requests``; concurrent calls are batched together. One event loop at a time."""
        loop = asyncio.get_running_loop()
        if self._worker is not None and self._worker.get_loop() is not loop:
            # requests left by an earlier event loop (a run that was interrupted) are dropped
            self._pending = [(r, f) for r, f in self._pending if f.get_loop() is loop]
        futures = []
        for req in requests:
            fut: asyncio.Future[GenerateOutput] = loop.create_future()
            try:
                check_request(req, self._vocab_size)
            except ConfigError as exc:  # this request fails alone, before it joins a batch
                fut.set_exception(exc)
            else:
                self._pending.append((req, fut))
            futures.append(fut)
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._worker = loop.create_task(self._drain())
        return list(await asyncio.gather(*futures))

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            if len(self._pending) < self.max_batch_size:
                await asyncio.sleep(self.batch_wait_s)  # let concurrent episodes join the batch
            batch = self._pending[: self.max_batch_size]
            del self._pending[: len(batch)]
            batch = [(r, f) for r, f in batch if not f.cancelled()]
            if not batch:
                continue
            try:
                outs = await loop.run_in_executor(self._executor, self.generate_sync, [r for r, _ in batch])
            except Exception as exc:  # noqa: BLE001 - handed to the waiting callers
                if len(batch) == 1:
                    if not batch[0][1].done():
                        batch[0][1].set_exception(exc)
                    continue
                # One row may have spoiled the batch: run each alone, so only its caller fails.
                log.warning(
                    "a batch of %d failed (%s: %s); retrying its rows alone",
                    len(batch),
                    type(exc).__name__,
                    exc,
                )
                for req, fut in batch:
                    if fut.done():
                        continue
                    try:
                        [out] = await loop.run_in_executor(self._executor, self.generate_sync, [req])
                    except Exception as row_exc:  # noqa: BLE001 - this row's own error
                        if not fut.done():
                            fut.set_exception(row_exc)
                    else:
                        if not fut.done():
                            fut.set_result(out)
            else:
                for (_, fut), out in zip(batch, outs, strict=True):
                    if not fut.done():
                        fut.set_result(out)

    def generate_sync(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        """Generate for ``requests`` in the calling thread (in chunks of ``max_batch_size``)."""
        for r in requests:
            check_request(r, self._vocab_size)
        outs: list[GenerateOutput] = []
        for i in range(0, len(requests), self.max_batch_size):
            with self._lock, bf16_autocast(self.autocast_bf16, self.device):
                outs.extend(self._generate_batch(list(requests[i : i + self.max_batch_size])))
        return outs

    @torch.inference_mode()
    def _generate_batch(self, requests: list[GenerateRequest]) -> list[GenerateOutput]:
        B = len(requests)
        if B == 0:
            return []
        params: list[SamplingParams] = [r.sampling for r in requests]
        stop_ids = [frozenset(p.stop_token_ids) for p in params]
        generators = []
        for p in params:
            g = torch.Generator(device=self.device)
            g.manual_seed(p.seed if p.seed is not None else self._rng.getrandbits(63))
            generators.append(g)
        cache, logits_BV, attn_BT, pos_BS, _ = _sampling.prefill(
            self.model,
            self._cache_kwarg,
            self.pad_token_id,
            [list(r.prompt_ids) for r in requests],
            min_shared_prefix=self.min_shared_prefix,
        )
        next_pos_B = pos_BS[:, -1] + 1
        new_ids: list[list[int]] = [[] for _ in range(B)]
        new_lps: list[list[float]] = [[] for _ in range(B)]
        new_tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(B)]
        want_top = min(max(p.top_logprobs for p in params), logits_BV.shape[-1])
        finish: list[FinishReason | None] = [None] * B
        matched: list[str | int | None] = [None] * B
        active = list(range(B))  # rows of the original batch still in the model batch, in order
        while active:
            tokens_A, lps_A = _sampling.sample_rows(
                logits_BV, [params[i] for i in active], [generators[i] for i in active]
            )
            tokens, lps = tokens_A.tolist(), lps_A.tolist()
            if want_top:  # the most likely tokens under the raw distribution (as the logprobs)
                top_vals, top_ids = torch.topk(torch.log_softmax(logits_BV.float(), dim=-1), want_top, dim=-1)
                top_vals_l, top_ids_l = top_vals.tolist(), top_ids.tolist()
            keep = []
            for j, i in enumerate(active):
                tok, p = tokens[j], params[i]
                new_ids[i].append(tok)
                new_lps[i].append(lps[j])
                if want_top and p.top_logprobs:
                    k = p.top_logprobs
                    new_tops[i].append(list(zip(top_ids_l[j][:k], top_vals_l[j][:k], strict=True)))
                if (tok in self.eos_token_ids and not p.ignore_eos) or tok in stop_ids[i]:
                    finish[i], matched[i] = FinishReason.STOP, tok
                elif p.stop and (hit := _sampling.find_stop(self.tokenizer, new_ids[i], p.stop)) is not None:
                    finish[i], matched[i] = FinishReason.STOP, hit
                elif len(new_ids[i]) >= p.max_tokens:
                    finish[i] = FinishReason.LENGTH
                else:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(active):  # drop finished rows from the batch and the cache
                idx = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(idx)
                attn_BT, next_pos_B, tokens_A = attn_BT[idx], next_pos_B[idx], tokens_A[idx]
                active = [active[j] for j in keep]
            attn_BT = torch.cat([attn_BT, attn_BT.new_ones((len(active), 1))], dim=1)
            out = self.model(
                input_ids=tokens_A[:, None],
                attention_mask=attn_BT,
                position_ids=next_pos_B[:, None],
                use_cache=True,
                **{self._cache_kwarg: cache},
            )
            cache = output_cache(out)
            logits_BV = out.logits[:, -1, :].float()
            next_pos_B = next_pos_B + 1
        results = []
        for i in range(B):
            ids = new_ids[i]
            text_ids = ids[:-1] if ids and ids[-1] in self.eos_token_ids and not params[i].ignore_eos else ids
            results.append(
                GenerateOutput(
                    token_ids=ids,
                    logprobs=new_lps[i] if params[i].logprobs else None,
                    finish_reason=finish[i] or FinishReason.LENGTH,
                    text=self.tokenizer.decode(text_ids, skip_special_tokens=False),
                    matched_stop=matched[i],
                    top_logprobs=new_tops[i] if params[i].top_logprobs else None,
                )
            )
        return results

    def update_weights(self, state_dict: Mapping[str, torch.Tensor]) -> int:
        """Copy ``state_dict`` into the model in place (between batches); returns tensors updated."""
        own = self.model.state_dict()
        with self._lock, torch.no_grad():
            for k, v in state_dict.items():
                own[k].copy_(v.to(own[k].device, own[k].dtype))
            self.weights_version += 1
        return len(state_dict)

    def close(self) -> None:
        """Stop the worker thread. Idempotent."""
        self._executor.shutdown(wait=False, cancel_futures=True)
