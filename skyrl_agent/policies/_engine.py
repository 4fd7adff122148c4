"""A continuous-batching inference engine over a transformers causal LM (CPU or CUDA).

One worker thread owns the model and runs a loop of steps, each: **schedule** (the
:class:`~skyrl_agent.policies._scheduler.Scheduler` picks the waiting requests that join the
running batch, under row, token and byte budgets), **run** (the
:class:`~skyrl_agent.policies._runner.ModelRunner` prefills the newcomers, reusing stored KV, and
runs one decode step for every running row), **postprocess** (finished rows resolve their
futures and leave their KV in the :class:`~skyrl_agent.policies._kv.PrefixStore` for the next
turn). The parts:

- :mod:`~skyrl_agent.policies._scheduler`: admission (plain Python, tested without a model);
- :mod:`~skyrl_agent.policies._kv`: the running rows' KV buffers and the prefix store;
- :mod:`~skyrl_agent.policies._runner`: prefill, decode, sampling, the shared prefix;
- this module: the public API, the loop, and which weights the rows run with.

Weights: stored KV is reused only with the weights it was computed with, unless
``allow_stale_prefix``. Changes are seen however they happen, before rows are admitted:
``update_weights``; a ``torch.optim`` optimizer stepping any of the engine's parameters (a global
optimizer post-step hook; fused kernels such as ``AdamW(fused=True)`` do not bump the parameters'
version counters, so those alone would miss the trainer's steps); :meth:`InferenceEngine.weights_changed`
for any other in-place change; and the parameters' version counters (plain in-place ops). With
``allow_stale_prefix`` reused KV may come from older weights: the logprobs are still those the
sampler computed, so the trainer's TIS correction sees what was sampled.

Logprobs are exact: each sampled token's logprob is ``log_softmax`` of the logits the engine
computed for it (temperature 1, before filters), the quantity the trainer's importance ratio
needs; ``tests/agent/test_engine_policy.py`` compares them with a full forward pass. A prefix
taken from the store was computed in another pass (other shapes, so other float rounding): a
row's logprobs then agree with a run without reuse to about 1e-6, not bit for bit, and a sampled
token can in rare cases differ; set ``prefix_cache_bytes=0`` where runs must repeat bit for bit.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from skyrl_agent._openmp import release_openmp_workers
from skyrl_agent.policies._attention import ATTENTION
from skyrl_agent.policies._cascade import use_cascade_attention
from skyrl_agent.policies._engine_config import EngineConfig, EngineStats
from skyrl_agent.policies._kv import PrefixStore, Slots
from skyrl_agent.policies._lean import LeanCopy
from skyrl_agent.policies._llama_step import LlamaDecodeStep
from skyrl_agent.policies._runner import ModelRunner
from skyrl_agent.policies._scheduler import Row, Scheduler, resolve
from skyrl_agent.types import GenerateOutput, GenerateRequest

__all__ = ["EngineConfig", "EngineStats", "InferenceEngine", "PrefixStore"]

log = logging.getLogger(__name__)


class InferenceEngine:
    """Continuous batching with KV reuse across turns for one model (see the module docstring).

    Args:
        model: a transformers causal LM in eval mode.
        tokenizer: its tokenizer (decodes outputs, finds stop strings).
        eos_token_ids: tokens that end a generation.
        pad_token_id: filler for left padding inside a prefill.
        cache_kwarg: the name under which ``model.forward`` takes a KV cache
            (``skyrl_agent.models.cache_kwarg``).
        config: the engine's settings.
        seed_source: draws a seed for requests without their own.
        context: a context manager entered around model calls (bf16 autocast).
        kv_dtype: the dtype of the KV cache and of stored prefixes; by default the model's.
            Under bf16 autocast, ``torch.bfloat16``: attention casts keys and values to bf16
            anyway, so storing them in bf16 changes no result and saves casting the whole cache
            at every decode step (and halves its memory).
        lean: a :class:`~skyrl_agent.policies._lean.LeanCopy` of ``model`` that runs the model
            calls instead of it (bf16 linear weights); it is refreshed from ``model`` whenever
            ``model``'s weights change, and gives the same results.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        eos_token_ids: frozenset[int],
        pad_token_id: int,
        cache_kwarg: str,
        config: EngineConfig | None = None,
        seed_source: Callable[[], int],
        context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
        kv_dtype: torch.dtype | None = None,
        lean: LeanCopy | None = None,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self._lean = lean
        self._run = lean.module if lean is not None else model  # what the steps call
        self._lean_key: int | None = None
        self.config = config or EngineConfig()
        # the engine's own copy runs the cascade attention function (masked prefills read
        # shared key/value heads in place; decode steps read a shared prefix once when
        # cascade_min_tokens is on); the trainer's module keeps SDPA
        switched = lean is not None and use_cascade_attention(lean.module)
        cascade_on = bool(switched and self.config.cascade_min_tokens > 0)
        self.eos_token_ids, self.pad_token_id = eos_token_ids, pad_token_id
        self._seed_source, self._context = seed_source, context
        self.device = next(model.parameters()).device
        cfg = model.config
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype = kv_dtype or next(model.parameters()).dtype
        self._slots = Slots(cfg.num_hidden_layers, heads, head_dim, dtype, self.device, self.config.max_rows)
        additive_mask = getattr(cfg, "_attn_implementation", "sdpa") not in (
            "sdpa",
            "flash_attention_2",
            ATTENTION,
            "skyrl_packed",  # the trainer's packed forward (trainers._packed): SDPA for every other call
        )
        self.store = PrefixStore(self.config.prefix_cache_bytes, self.config.min_reuse_tokens)
        self.weights_version = 0
        self._param_ids = frozenset(id(p) for p in model.parameters())
        self._external_changes = 0  # optimizer steps on our parameters, weights_changed() calls
        self._stats = EngineStats()
        self._cv = threading.Condition()  # guards the queue and the counters
        self._step_lock = threading.Lock()  # held by a scheduler step or a weight update
        self.scheduler = Scheduler(self.config, self._slots.planned_bytes, self._slots.bytes_per_token)
        self.runner = ModelRunner(
            self._run,
            LlamaDecodeStep.build(self._run) if self.config.lean_decode_step else None,
            tokenizer,
            config=self.config,
            eos_token_ids=eos_token_ids,
            pad_token_id=pad_token_id,
            cache_kwarg=cache_kwarg,
            sched=self.scheduler,
            slots=self._slots,
            store=self.store,
            stats=self._stats,
            lock=self._cv,
            cascade_on=cascade_on,
            additive_mask=additive_mask,
            # with the opt-in matmul attention on CPU, decode steps attend over whole buffers:
            # contiguous keys and values (a strided slice cost a copy per layer when those
            # matmuls ran in bf16: 39% of a step, measured; the float32 version casts them anyway)
            full_width_decode=getattr(cfg, "_attn_implementation", None) == ATTENTION,
        )
        self.runner.weights_key = self._current_weights_key()
        self._updates_waiting = 0
        self._closed = False
        # the engine's thread computes with as many threads as its creator set (a new thread
        # starts from the runtime's default, not from torch.set_num_threads of another thread)
        self._num_threads = torch.get_num_threads()
        self._release_threads = self.device.type == "cpu"
        self._thread = threading.Thread(target=self._loop, name="skyrl-engine", daemon=True)
        self._optimizer_hook = _watch_optimizer_steps(self)
        self._thread.start()
        _LIVE.add(self)

    # ------------------------------------------------------------------ public
    def submit(self, request: GenerateRequest, deadline_s: float | None = None) -> concurrent.futures.Future:
        """Queue ``request``; the future resolves to its :class:`GenerateOutput` (or raises).
        Cancelling the future drops the request at the next step."""
        return self.submit_many([request], deadline_s)[0]

    def submit_many(
        self, requests: Sequence[GenerateRequest], deadline_s: float | None = None
    ) -> list[concurrent.futures.Future]:
        """Queue ``requests`` together (one step admits them all when there is room, so a batch
        given at once prefills at once however the engine's thread is timed); one future each."""
        rows = []
        for request in requests:
            fut: concurrent.futures.Future = concurrent.futures.Future()
            p = request.sampling
            g = torch.Generator(device=self.device)
            g.manual_seed(p.seed if p.seed is not None else self._seed_source())
            deadline = time.monotonic() + deadline_s if deadline_s is not None else None
            rows.append(Row(request, fut, deadline, g, [int(x) for x in request.prompt_ids]))
        if self._release_threads:  # this thread's idle OpenMP workers would slow the engine's
            release_openmp_workers()
        with self._cv:
            if self._closed:
                raise RuntimeError("the inference engine is closed")
            self.scheduler.waiting.extend(rows)
            self._cv.notify_all()
        return [r.future for r in rows]

    def generate(self, requests: Sequence[GenerateRequest]) -> list[GenerateOutput]:
        """Submit ``requests`` and wait for all of them (from any thread but the engine's)."""
        return [f.result() for f in self.submit_many(requests)]

    def update_weights(self, apply: Callable[[], None]) -> None:
        """Run ``apply`` (which changes the model's weights) between steps, once the running rows
        have finished; no row starts meanwhile. The prefix store is emptied unless
        ``allow_stale_prefix``."""
        with self._cv:
            self._updates_waiting += 1
        try:
            while True:
                with self._step_lock:
                    if not self.scheduler.running:
                        apply()
                        self.weights_version += 1
                        self.runner.weights_key = self._current_weights_key()
                        if not self.config.allow_stale_prefix:
                            self.store.clear()
                        self.runner.shared = None
                        return
                with self._cv:
                    self._cv.wait(timeout=0.05)
        finally:
            with self._cv:
                self._updates_waiting -= 1
                self._cv.notify_all()

    def weights_changed(self) -> None:
        """Say that the model's weights were changed in place outside :meth:`update_weights` (by a
        kernel that bypasses version counters); stored KV from before is not reused after it.
        ``torch.optim`` steps on the engine's parameters are seen without this call."""
        self._external_changes += 1

    def stats(self) -> EngineStats:
        """A copy of the counters."""
        with self._cv:
            s = dataclasses.replace(self._stats)
            s.store_evictions = self.store.evictions
            s.prefix_store_bytes = self.store.nbytes
            s.peak_rows = self.scheduler.peak_rows
            s.peak_tokens_in_flight = self.scheduler.peak_tokens_in_flight
            s.budget_waits = self.scheduler.budget_waits
            return s

    def clear_prefix_store(self) -> None:
        """Forget every stored prefix."""
        with self._cv:
            self.store.clear()

    def release_buffers(self) -> int:
        """Free the running rows' KV buffers while no row runs (the next admission allocates them
        again; under a byte budget, or after a context past 4,096 columns, the engine does so by
        itself); returns the bytes they held (0 while rows run)."""
        with self._step_lock:
            if self.scheduler.running:
                return 0
            held = self._slots.nbytes()
            self._slots.release()
            return held

    def close(self) -> None:
        """Stop the worker; waiting and running requests fail. Idempotent."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._cv.notify_all()
        self._optimizer_hook.remove()
        self._thread.join(timeout=30)

    # ------------------------------------------------------------------ the loop
    def _has_work(self) -> bool:
        return self._closed or self.scheduler.has_work(bool(self._updates_waiting))

    def _loop(self) -> None:
        if torch.get_num_threads() != self._num_threads:
            # only when it differs: the call also sets process-wide state (MKL's thread count
            # and its dynamic adjustment), which made two engines' results differ run to run
            torch.set_num_threads(self._num_threads)
        sched, runner = self.scheduler, self.runner
        while True:
            with self._cv:
                idle = not self._has_work()
            if idle and self._release_threads and release_openmp_workers():
                with self._cv:  # the trainer may compute meanwhile (skyrl_agent._openmp)
                    self._stats.workers_released += 1
            with self._cv:
                self._cv.wait_for(self._has_work)
                if self._closed:
                    break
            admitted: list[Row] = []
            with self._step_lock:
                try:
                    with self._cv:
                        admitted = self._admit()
                    self._refresh_lean()
                    with torch.inference_mode(), self._context():
                        if admitted:
                            runner.prefill(admitted)
                        runner.reserved = 0
                        if sched.running:
                            runner.decode()
                except Exception as exc:  # noqa: BLE001 - a failed step fails its rows, not the engine
                    log.exception("inference engine step failed")
                    runner.fail_all([*admitted, *sched.running], exc)
                self._stats.peak_kv_bytes = max(self._stats.peak_kv_bytes, self._slots.nbytes())
                if not sched.running and (self._slots.cap_len > 4096 or self.config.memory_bytes):
                    self._slots.release()  # the buffers go back once a long context (or any, under a budget) is done
            with self._cv:
                self._cv.notify_all()  # a weight update may wait for the rows to drain
        err = RuntimeError("the inference engine was closed")
        with self._step_lock:
            runner.fail_all([*sched.running, *sched.waiting], err)
            sched.waiting.clear()

    def _admit(self) -> list[Row]:
        """Newcomers for this step (:meth:`Scheduler.admit`), under the weights they start with;
        the prefix store shrinks to what the byte budget leaves it; refused requests fail."""
        sched = self.scheduler
        if not sched.running and sched.waiting and not self._updates_waiting:
            key = self._current_weights_key()  # in flight, rows keep the weights they started with
            if key != self.runner.weights_key:
                self.runner.weights_key = key
                self.runner.shared = None
                if not self.config.allow_stale_prefix:
                    self.store.clear()
        admission = sched.admit(updates_waiting=bool(self._updates_waiting))
        for row, exc in admission.refused:
            resolve(row.future, exc=exc)
        for row in admission.rows:
            row.version = self.runner.weights_key
        if admission.store_room is not None:
            self.store.shrink_to(admission.store_room)
            self.runner.reserved = admission.reserved
        return admission.rows

    def _refresh_lean(self) -> None:
        """Bring the lean copy up to the model's weights when they changed (rows in flight
        then go on with the new weights, as they would sampling the model itself)."""
        if self._lean is None:
            return
        key = self._current_weights_key()
        if key != self._lean_key:
            self._lean.refresh()
            self._lean_key = key
            self._stats.lean_refreshes += 1

    def _current_weights_key(self) -> int:
        """Changes whenever a parameter is replaced, modified in place (its version counter) or
        stepped by an optimizer, and on :meth:`weights_changed`."""
        return hash((self._external_changes, tuple((id(p), p._version) for p in self.model.parameters())))


def _watch_optimizer_steps(engine: InferenceEngine) -> Any:
    """Register a global ``torch.optim`` post-step hook that counts, on ``engine`` (held weakly),
    every optimizer step that updates one of its parameters. Returns the hook's handle."""
    ref = weakref.ref(engine)

    def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        eng = ref()
        if eng is None:
            return
        ids = eng._param_ids
        if any(id(p) in ids for group in optimizer.param_groups for p in group["params"]):
            eng._external_changes += 1

    return register_optimizer_step_post_hook(hook)


#: Engines not yet closed. At interpreter exit each is closed (its thread joined after its step)
#: before daemon threads are frozen: a thread stopped inside a torch call aborts the process.
_LIVE: weakref.WeakSet[InferenceEngine] = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    for engine in list(_LIVE):
        engine.close()
