"""A local Hugging Face transformers policy (CPU or GPU): token ids in, token ids and logprobs out.

Generation is our own loop over ``model(...)`` with a KV cache, so it returns the exact
log-probability of each sampled token under the model's raw distribution (temperature 1, no
filters): the quantity the trainer's importance ratio needs. See :mod:`skyrl_agent.types`.

Requests go to a continuous-batching engine (:mod:`skyrl_agent.policies._engine`, the default
``scheduler="continuous"``): new requests join the running batch between decode steps, finished
rows leave at once, and a request that extends an earlier request's prompt and response (the
next turn of an episode) reuses that KV instead of computing it again.

With ``scheduler="static"`` (kept for comparison, ``bench/bench_generation.py``) concurrent
``generate`` calls are gathered by a micro-batcher instead: requests that arrive within ``batch_wait_s`` of each other, up to
``max_batch_size``, run as one left-padded batch. On a CPU a batch of 8 gives about 3.5x the
tokens per second of one sequence. Rows leave the batch as soon as they finish. A request fails
alone: one that cannot run (no prompt, ids outside the vocabulary, a seed torch cannot take) is
refused before it joins a batch, and when a batch fails anyway its rows are retried one by one,
so only the request at fault gets the error.

Weight updates from the trainer (:meth:`HFPolicy.update_weights`) wait for the running rows
and copy tensors in place, so the next rows sample from the new weights (and the engine's
stored prefixes, computed with the old ones, are dropped).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import random
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from skyrl_agent.models import BUNDLED_MODEL, cache_kwarg, load_model_and_tokenizer, output_cache
from skyrl_agent.policies._attention import use_fast_decode_attention
from skyrl_agent.policies._engine import EngineConfig, EngineStats, InferenceEngine
from skyrl_agent.policies._lean import LeanCopy, lean_copy_applies
from skyrl_agent.policies._sampling import find_stop, prefill, sample_rows
from skyrl_agent.types import (
    SEED_MAX,
    SEED_MIN,
    FinishReason,
    GenerateOutput,
    GenerateRequest,
    SamplingParams,
)
from skyrl_gym.errors import ConfigError

__all__ = ["HFPolicy", "EngineConfig", "EngineStats"]

log = logging.getLogger(__name__)


class HFPolicy:
    """Batched sampling from a local causal LM.

    Args:
        model: a transformers causal LM (``LlamaForCausalLM``, ``Qwen2ForCausalLM``...).
        tokenizer: its tokenizer.
        max_batch_size: most rows in one model call.
        batch_wait_s: how long the micro-batcher waits for more requests before a batch starts.
        seed: seeds the generator used by requests without their own seed.
        autocast_bf16: run the model under bf16 autocast (on this CPU about 25% faster
            generation); logits are turned back into float32 before sampling, so logprobs are
            float32 log-softmaxes of bf16-computed logits.
        min_shared_prefix: prompts of one batch that share at least this many leading tokens
            have that prefix computed once (see ``_prefill``); 0 turns prefix sharing off.
        scheduler: ``"continuous"`` (the inference engine: continuous batching, KV reuse across
            turns) or ``"static"`` (the micro-batcher: a batch runs until its longest row ends).
        engine: the engine's settings (``max_rows`` defaults to ``max_batch_size``).
        fast_decode_attention: on CPU, switch a model that uses SDPA attention to
            :data:`skyrl_agent.policies._attention.ATTENTION`, which computes one-token decode
            steps with two float32 matmuls and hands everything else to SDPA unchanged. It
            changes ``model.config``. Off by default: with the transformers in use it is no
            faster than SDPA there (measured in that module's docstring).
        bf16_weight_copy: with ``autocast_bf16`` on a CPU float32 model, the engine decodes with
            a copy whose linear weights are bf16 (:class:`~skyrl_agent.policies._lean.LeanCopy`:
            the same results, without casting every weight at every step; it costs the
            model's linear weights once more in bf16) and refreshes it when ``model`` changes.
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
        scheduler: str = "continuous",
        engine: EngineConfig | None = None,
        fast_decode_attention: bool = False,
        bf16_weight_copy: bool = True,
    ) -> None:
        if max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if scheduler not in ("continuous", "static"):
            raise ConfigError(f"unknown scheduler {scheduler!r}; use 'continuous' or 'static'")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.autocast_bf16 = autocast_bf16
        self.min_shared_prefix = min_shared_prefix
        self.device = next(model.parameters()).device
        if fast_decode_attention:
            use_fast_decode_attention(model)
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_token_ids: frozenset[int] = frozenset(int(e) for e in eos_ids)
        pad = (
            tokenizer.pad_token_id
            if tokenizer.pad_token_id is not None
            else min(self.eos_token_ids, default=0)
        )
        self.pad_token_id = int(pad)
        self.weights_version = 0
        self._cache_kwarg = cache_kwarg(model)
        self._vocab_size = int(model.get_input_embeddings().num_embeddings)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()  # one batch or weight update at a time
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hf-policy")
        self._pending: list[tuple[GenerateRequest, asyncio.Future[GenerateOutput]]] = []
        self._worker: asyncio.Task[None] | None = None
        self.scheduler = scheduler
        self.engine: InferenceEngine | None = None
        if scheduler == "continuous":
            self.engine = InferenceEngine(
                model,
                tokenizer,
                eos_token_ids=self.eos_token_ids,
                pad_token_id=self.pad_token_id,
                cache_kwarg=self._cache_kwarg,
                config=engine or EngineConfig(max_rows=max_batch_size, min_shared_prefix=min_shared_prefix),
                seed_source=lambda: self._rng.getrandbits(63),
                context=self._autocast,
                kv_dtype=torch.bfloat16 if autocast_bf16 else None,
                lean=LeanCopy(model)
                if bf16_weight_copy and lean_copy_applies(model, autocast_bf16)
                else None,
            )

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str] = BUNDLED_MODEL,
        *,
        dtype: str = "float32",
        device: str = "cpu",
        **kw: Any,
    ) -> HFPolicy:
        """Load ``path`` (a local directory or :data:`~skyrl_agent.models.BUNDLED_MODEL`)."""
        model, tok = load_model_and_tokenizer(path, dtype=dtype, device=device)
        return cls(model, tok, **kw)

    # ------------------------------------------------------------------ async API
    async def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        """Generate for ``requests``; concurrent calls are batched together.

        Use from one event loop at a time."""
        if self.engine is not None:
            return await self._submit(requests)
        loop = asyncio.get_running_loop()
        if self._worker is not None and self._worker.get_loop() is not loop:
            # requests left by an earlier event loop (a run that was interrupted) are dropped
            self._pending = [(r, f) for r, f in self._pending if f.get_loop() is loop]
        futures = []
        for req in requests:
            fut: asyncio.Future[GenerateOutput] = loop.create_future()
            try:
                self._check(req)
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

    async def _submit(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        futures = self.submit(requests)  # checked, then queued together: admitted together
        try:
            return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))
        except asyncio.CancelledError:
            for fut in futures:
                fut.cancel()  # the engine drops the rows at its next step
            raise

    def engine_stats(self) -> EngineStats | None:
        """The engine's counters (prefill, reuse, batch sizes), or None with ``scheduler="static"``."""
        return self.engine.stats() if self.engine is not None else None

    def _check(self, req: GenerateRequest) -> None:
        """Raise :class:`ConfigError` for a request that would fail the whole batch it joins."""
        if len(req.prompt_ids) == 0:
            raise ConfigError("a GenerateRequest needs at least one prompt token")
        vocab = self._vocab_size
        if any(not 0 <= t < vocab for t in req.prompt_ids):
            raise ConfigError(f"prompt_ids must be token ids in [0, {vocab - 1}]")
        seed = req.sampling.seed  # with_turn() skips SamplingParams' own checks
        if seed is not None and not SEED_MIN <= seed <= SEED_MAX:
            raise ConfigError(f"seed must be an integer in [{SEED_MIN}, {SEED_MAX}], got {seed}")
        if req.sampling.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {req.sampling.max_tokens}")

    # ------------------------------------------------------------------ sync API
    def submit(self, requests: Sequence[GenerateRequest]) -> list[concurrent.futures.Future]:
        """Queue ``requests`` on the engine from any thread and return at once: one future each
        (a :class:`GenerateOutput`). Cancelling a future drops its row at the engine's next step,
        so a caller that waits can give up (a deadline, a client gone) without blocking others.
        A bad request raises :class:`ConfigError` before any is queued. Needs the engine
        (``scheduler="continuous"``)."""
        if self.engine is None:
            raise ConfigError("HFPolicy.submit needs the engine (scheduler='continuous'); use generate_sync")
        for r in requests:
            self._check(r)
        return self.engine.submit_many(requests)

    def generate_sync(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        """Generate for ``requests`` in the calling thread (in chunks of ``max_batch_size``)."""
        for r in requests:
            self._check(r)
        if self.engine is not None:
            return self.engine.generate(requests)
        outs: list[GenerateOutput] = []
        for i in range(0, len(requests), self.max_batch_size):
            with self._lock, self._autocast():
                outs.extend(self._generate_batch(list(requests[i : i + self.max_batch_size])))
        return outs

    def _autocast(self) -> contextlib.AbstractContextManager:
        if not self.autocast_bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

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

        cache, logits_BV, attn_BT, next_pos_B = self._prefill([list(r.prompt_ids) for r in requests])

        new_ids: list[list[int]] = [[] for _ in range(B)]
        new_lps: list[list[float]] = [[] for _ in range(B)]
        new_tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(B)]
        want_top = min(max(p.top_logprobs for p in params), logits_BV.shape[-1])
        finish: list[FinishReason | None] = [None] * B
        matched: list[str | int | None] = [None] * B
        active = list(range(B))  # rows of the original batch still in the model batch, in order
        while active:
            tokens_A, lps_A = sample_rows(
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
                elif p.stop and (hit := find_stop(self.tokenizer, new_ids[i], p.stop)) is not None:
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

    def _prefill(self, prompts: list[list[int]]) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run the prompts through the model (their shared prefix once: ``_sampling.prefill``);
        return (cache, last logits, attention mask, next positions)."""
        cache, logits_BV, attn_BT, pos_BS, _ = prefill(
            self.model,
            self._cache_kwarg,
            self.pad_token_id,
            prompts,
            min_shared_prefix=self.min_shared_prefix,
        )
        return cache, logits_BV, attn_BT, pos_BS[:, -1] + 1

    # ------------------------------------------------------------------ weights
    def update_weights(self, state_dict: Mapping[str, torch.Tensor]) -> int:
        """Copy ``state_dict`` into the model in place (between batches); returns tensors updated.

        Names must match ``model.state_dict()``; a subset is fine (e.g. only trained layers).
        """
        own = self.model.state_dict()
        unknown = [k for k in state_dict if k not in own]
        if unknown:
            raise ConfigError(
                f"update_weights: unknown parameter names {unknown[:5]}; expected names like {list(own)[:3]}"
            )
        for k, v in state_dict.items():
            if tuple(v.shape) != tuple(own[k].shape):
                raise ConfigError(
                    f"update_weights: {k} has shape {tuple(v.shape)}, model has {tuple(own[k].shape)}"
                )

        def apply() -> None:
            with self._lock, torch.no_grad():
                for k, v in state_dict.items():
                    own[k].copy_(v.to(own[k].device, own[k].dtype))
                self.weights_version += 1

        if self.engine is not None:
            self.engine.update_weights(apply)
        else:
            apply()
        return len(state_dict)

    load_state_dict = update_weights

    def weights_changed(self) -> None:
        """Say that the wrapped model's weights were changed in place by the caller, so KV stored
        before the change is never reused. ``torch.optim`` steps on the model's parameters are
        noticed without this call (see :mod:`skyrl_agent.policies._engine`); call it after any
        other in-place change, e.g. a custom kernel writing into the parameters."""
        self.weights_version += 1
        if self.engine is not None:
            self.engine.weights_changed()

    def drop_stale_kv(self) -> int:
        """Empty the engine's prefix store ahead of a change to the weights it samples with, and
        return the bytes it held; free the idle rows' KV buffers too. After the change the
        stored KV is never reused (unless ``EngineConfig.allow_stale_prefix``), and the engine
        would empty the store at its next admission anyway; the trainer calls this before its
        train step so that neither is held through the step's peak. With ``allow_stale_prefix``
        the store stays (0 is returned); the static scheduler has neither."""
        if self.engine is None:
            return 0
        self.engine.release_buffers()  # no row runs between the rollouts and the update
        if self.engine.config.allow_stale_prefix:
            return 0
        held = self.engine.stats().prefix_store_bytes
        self.engine.clear_prefix_store()
        return held

    def close(self) -> None:
        """Stop the worker threads. Idempotent."""
        if self.engine is not None:
            self.engine.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
