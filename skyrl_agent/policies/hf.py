"""A local Hugging Face transformers policy (CPU or GPU): token ids in, token ids and logprobs out.

Generation is our own loop over ``model(...)`` with a KV cache, so it returns the exact
log-probability of each sampled token under the model's raw distribution (temperature 1, no
filters): the quantity the trainer's importance ratio needs. See :mod:`skyrl_agent.types`.

Requests go to a continuous-batching engine (:mod:`skyrl_agent.policies._engine`): new
requests join the running batch between decode steps, finished rows leave at once, and a
request that extends an earlier request's prompt and response (the next turn of an episode)
reuses that KV instead of computing it again. A request that cannot run (no prompt, ids outside
the vocabulary, a seed torch cannot take) is refused before it is queued
(:func:`check_request`); a step that fails anyway fails the rows it ran and the engine goes on.
The static micro-batcher this policy once had (a left-padded batch run until its longest row
ends) is now the benchmarks' and tests' baseline, ``bench/static_policy.py``.

Weight updates from the trainer (:meth:`HFPolicy.update_weights`) wait for the running rows
and copy tensors in place, so the next rows sample from the new weights (and the engine's
stored prefixes, computed with the old ones, are dropped).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import random
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from skyrl_agent.models import BUNDLED_MODEL, bf16_autocast, cache_kwarg, load_model_and_tokenizer
from skyrl_agent.policies._attention import use_fast_decode_attention
from skyrl_agent.policies._engine import EngineConfig, EngineStats, InferenceEngine
from skyrl_agent.policies._lean import LeanCopy, lean_copy_applies
from skyrl_agent.types import SEED_MAX, SEED_MIN, GenerateOutput, GenerateRequest
from skyrl_gym.errors import ConfigError

__all__ = ["HFPolicy", "EngineConfig", "EngineStats", "bf16_autocast", "check_request", "eos_and_pad"]


def check_request(req: GenerateRequest, vocab_size: int) -> None:
    """Raise :class:`ConfigError` for a request that would fail the batch it joins: no prompt,
    ids outside ``[0, vocab_size)``, a seed torch cannot take, ``max_tokens`` under 1."""
    if len(req.prompt_ids) == 0:
        raise ConfigError("a GenerateRequest needs at least one prompt token")
    if any(not 0 <= t < vocab_size for t in req.prompt_ids):
        raise ConfigError(f"prompt_ids must be token ids in [0, {vocab_size - 1}]")
    seed = req.sampling.seed  # with_turn() skips SamplingParams' own checks
    if seed is not None and not SEED_MIN <= seed <= SEED_MAX:
        raise ConfigError(f"seed must be an integer in [{SEED_MIN}, {SEED_MAX}], got {seed}")
    if req.sampling.max_tokens < 1:
        raise ConfigError(f"max_tokens must be >= 1, got {req.sampling.max_tokens}")


def eos_and_pad(model: Any, tokenizer: Any) -> tuple[frozenset[int], int]:
    """The token ids a generation ends on (the model's generation config and the tokenizer's)
    and the id that pads a batch (the tokenizer's, else the smallest end id)."""
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        eos_ids.add(tokenizer.eos_token_id)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids, default=0)
    return frozenset(int(e) for e in eos_ids), int(pad)


class HFPolicy:
    """Batched sampling from a local causal LM.

    Args:
        model: a transformers causal LM (``LlamaForCausalLM``, ``Qwen2ForCausalLM``...).
        tokenizer: its tokenizer.
        max_batch_size: most rows in one model call (the engine's ``max_rows`` unless ``engine``
            sets it).
        seed: seeds the generator used by requests without their own seed.
        autocast_bf16: run the model under bf16 autocast (on this CPU about 25% faster
            generation); logits are turned back into float32 before sampling, so logprobs are
            float32 log-softmaxes of bf16-computed logits.
        min_shared_prefix: prompts admitted together that share at least this many leading
            tokens have that prefix computed once; 0 turns prefix sharing off.
        scheduler: ``"continuous"``, the only one (kept so that callers naming it still work);
            the static micro-batcher moved to ``bench/static_policy.py``.
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
        if scheduler != "continuous":
            raise ConfigError(
                f"unknown scheduler {scheduler!r}: HFPolicy has the continuous-batching engine only; "
                "the static micro-batcher is bench/static_policy.py's StaticBatchPolicy (a baseline)"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.autocast_bf16 = autocast_bf16
        self.min_shared_prefix = min_shared_prefix
        self.device = next(model.parameters()).device
        if fast_decode_attention:
            use_fast_decode_attention(model)
        self.eos_token_ids, self.pad_token_id = eos_and_pad(model, tokenizer)
        self.weights_version = 0
        self._cache_kwarg = cache_kwarg(model)
        self._vocab_size = int(model.get_input_embeddings().num_embeddings)
        self._rng = random.Random(seed)
        self.scheduler = scheduler
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
            lean=LeanCopy(model) if bf16_weight_copy and lean_copy_applies(model, autocast_bf16) else None,
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
        return await self._submit(requests)

    async def _submit(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        futures = self.submit(requests)  # checked, then queued together: admitted together
        try:
            return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))
        except asyncio.CancelledError:
            for fut in futures:
                fut.cancel()  # the engine drops the rows at its next step
            raise

    def engine_stats(self) -> EngineStats:
        """The engine's counters (prefill, reuse, batch sizes)."""
        return self.engine.stats()

    def _check(self, req: GenerateRequest) -> None:
        check_request(req, self._vocab_size)

    # ------------------------------------------------------------------ sync API
    def submit(self, requests: Sequence[GenerateRequest]) -> list[concurrent.futures.Future]:
        """Queue ``requests`` on the engine from any thread and return at once: one future each
        (a :class:`GenerateOutput`). Cancelling a future drops its row at the engine's next step,
        so a caller that waits can give up (a deadline, a client gone) without blocking others.
        A bad request raises :class:`ConfigError` before any is queued."""
        for r in requests:
            self._check(r)
        return self.engine.submit_many(requests)

    def generate_sync(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        """Generate for ``requests`` and wait for them (the engine runs them in its own thread)."""
        for r in requests:
            self._check(r)
        return self.engine.generate(requests)

    def _autocast(self) -> contextlib.AbstractContextManager:
        return bf16_autocast(self.autocast_bf16, self.device)

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
            with torch.no_grad():
                for k, v in state_dict.items():
                    own[k].copy_(v.to(own[k].device, own[k].dtype))
                self.weights_version += 1

        self.engine.update_weights(apply)  # between engine steps, the running rows drained
        return len(state_dict)

    load_state_dict = update_weights

    def weights_changed(self) -> None:
        """Say that the wrapped model's weights were changed in place by the caller, so KV stored
        before the change is never reused. ``torch.optim`` steps on the model's parameters are
        noticed without this call (see :mod:`skyrl_agent.policies._engine`); call it after any
        other in-place change, e.g. a custom kernel writing into the parameters."""
        self.weights_version += 1
        self.engine.weights_changed()

    def drop_stale_kv(self) -> int:
        """Empty the engine's prefix store ahead of a change to the weights it samples with, and
        return the bytes it held; free the idle rows' KV buffers too. After the change the
        stored KV is never reused (unless ``EngineConfig.allow_stale_prefix``), and the engine
        would empty the store at its next admission anyway; the trainer calls this before its
        train step so that neither is held through the step's peak. With ``allow_stale_prefix``
        the store stays (0 is returned)."""
        self.engine.release_buffers()  # no row runs between the rollouts and the update
        if self.engine.config.allow_stale_prefix:
            return 0
        held = self.engine.stats().prefix_store_bytes
        self.engine.clear_prefix_store()
        return held

    def close(self) -> None:
        """Stop the engine's thread. Idempotent."""
        self.engine.close()
