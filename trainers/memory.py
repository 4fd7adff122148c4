"""Where a run's memory is: the process's resident size and peaks, and the parts the trainer holds.

Linux only for the process figures (``/proc/self``); elsewhere they read 0. A phase's peak
(:class:`PhasePeak`) is the largest resident size a thread samples every ``interval_s`` while
the phase runs. The kernel's own high-water mark (``VmHWM``) could be reset per phase through
``/proc/self/clear_refs``, but that resets it for the whole process, and ``/usr/bin/time -v``
then reports the last phase's peak instead of the run's (a train step's gigabytes last for
seconds, so sampling at 20 ms does not miss them).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "FLOAT32_PER_BF16",
    "PhasePeak",
    "RESIDENT_PER_COUNTED",
    "activation_bytes_per_token",
    "machine_bytes",
    "peak_bytes",
    "release_free_memory",
    "release_if_above",
    "rss_bytes",
    "state_bytes",
]

GB = 1e9


def _status_kb(field: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_bytes() -> int:
    """The process's resident memory now (0 where ``/proc`` is missing)."""
    return _status_kb("VmRSS") * 1024


def peak_bytes() -> int:
    """The process's resident peak since it started (the kernel's ``VmHWM``)."""
    return _status_kb("VmHWM") * 1024


_libc: Any = None


def release_free_memory() -> bool:
    """Hand the C heap's free pages back to the kernel (glibc's ``malloc_trim(0)``, over every
    thread's arena; on jemalloc, :func:`trainers.allocator.purge`); ``False`` where the C
    library has no such call.

    Torch's CPU tensors live on the C heap. A train step frees gigabytes of activations, but glibc
    keeps most of them in the training thread's arena, where the sampler's thread (which
    allocates from an arena of its own) cannot reuse them: without this, a run's resident memory
    after its first train step stays near that step's peak, and the rollouts' memory comes on
    top (``python bench/bench_memory.py --trainer`` prints the resident size after each step
    before and after this call)."""
    from trainers.allocator import purge

    if purge():  # on jemalloc (``skyrl train --allocator jemalloc``): its own call
        return True
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL("libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if not _libc:
        return False
    _libc.malloc_trim(0)
    return True


def machine_bytes() -> int:
    """The memory this process may use: the machine's (``MemTotal``), or its cgroup's limit when
    that is lower; 0 where neither can be read."""
    total = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit() and (not total or int(limit) < total):
            total = int(limit)
    except OSError:
        pass
    return total


def release_if_above(fraction: float) -> bool:
    """:func:`release_free_memory` when the resident size is above ``fraction`` of
    :func:`machine_bytes` (0: always; 1 or more: never); whether it released.

    Not always: pages handed back must be faulted in again by the next phase that allocates.
    What that costs a run is not measured yet (decision 0029's first reading, 24-48 s train
    steps against about 15 s, compared runs with different batch sizes; see its correction)."""
    if fraction >= 1:
        return False
    if fraction > 0:
        total = machine_bytes()
        if not total or rss_bytes() <= fraction * total:
            return False
    return release_free_memory()


@dataclass
class PhasePeak:
    """The resident peak of a stretch of code: ``with PhasePeak() as p: ...; p.peak``."""

    interval_s: float = 0.02
    """How often the sampling thread reads the resident size."""
    start: int = 0
    """Resident bytes when the phase began."""
    peak: int = 0
    """Resident peak during the phase (bytes)."""
    end: int = 0
    """Resident bytes when it ended."""

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, rss_bytes())

    def __enter__(self) -> PhasePeak:
        self.start = self.peak = rss_bytes()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, name="skyrl-memory-peak", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.end = rss_bytes()
        self.peak = max(self.peak, self.start, self.end)


def _tensor_bytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes of ``model``'s parameters and buffers, of their gradients, and of ``optimizer``'s
    state (AdamW: two moments a parameter, created at its first step)."""
    weights = sum(_tensor_bytes(p) for p in model.parameters()) + sum(
        _tensor_bytes(b) for b in model.buffers()
    )
    grads = sum(_tensor_bytes(p.grad) for p in model.parameters())
    opt = 0
    if optimizer is not None:
        for state in optimizer.state.values():
            opt += sum(_tensor_bytes(v) for v in state.values() if isinstance(v, torch.Tensor))
    return {"weights": weights, "grads": grads, "optimizer": opt}


#: Resident bytes per byte of the activations counted by :func:`activation_bytes_per_token`,
#: measured under glibc on SmolLM2-135M (bf16 autocast, 2 cores; one micro-batch of the main
#: job's shape, 3,826 computed tokens, ``python bench/bench_allocator.py``, the gradients' 0.54
#: GB taken off; decision 0040): plain, 1.55 MB a token resident against 1.04 MB counted (1.23
#: MB in use: the heap keeps freed blocks among the kept ones); checkpointed, 0.83 MB resident
#: against 0.20 MB counted (0.37 MB in use: the recomputed layers' blocks are freed among the
#: kept inputs). Under jemalloc the same step is resident at about 1.1 and 0.25 MB a token.
RESIDENT_PER_COUNTED = {False: 1.5, True: 4.2}

#: What a computed token costs in float32 (no bf16 autocast: a CPU without native bf16) against
#: the bf16 estimate. Measured on an AVX2 machine, glibc, the bundled model, one micro-batch of
#: 3,039 computed tokens (``python bench/bench_memory.py --trainer --no-bf16 --variants
#: lean-mbt8192 ckpt-mbt8192 --groups 1 --group-size 4``,
#: ``results/bench_memory/bench-memory-trainer-fp32-avx2-2026-12-07.txt``): 1.71 MB a token with
#: the elementwise parts recomputed and 1.28 MB checkpointed, 1.41x and 1.56x the bf16 estimates
#: (1.21 and 0.82 MB); not the 2x that float32's bytes alone suggest (the heap's slack does not
#: double). The larger, rounded up.
FLOAT32_PER_BF16 = 1.6


def activation_bytes_per_token(model: torch.nn.Module, bf16: bool = True) -> int:
    """An estimate of the resident bytes one computed token adds to a train step's peak: the
    tensors a Llama-shaped decoder layer keeps for its backward, counted op by op under bf16
    autocast with a float32 residual stream (two norms of ``4 h`` each kept twice, three casts of
    the normed input for q/k/v and two for the MLP, q/k/v and their rotary copies, the
    attention's output, the MLP's four ``intermediate``-wide tensors: ``36 h + 8 kv + 8 i``
    bytes), times the layers, less ``4 h`` for each norm and ``2 i`` for each MLP whose elementwise
    ops are recomputed (:func:`trainers.checkpointing.enable_elementwise_recompute`); with
    checkpointed layers (:mod:`trainers.checkpointing`) each layer's ``float32`` input and KV
    instead, plus about three layers' worth for the recompute and its backward; then scaled by
    :data:`RESIDENT_PER_COUNTED`. Without bf16 the tensors are float32: :data:`FLOAT32_PER_BF16`
    times the bytes (measured). 0 when the model's config lacks the sizes."""
    from trainers.checkpointing import checkpointed_layers, recomputed_parts

    cfg = getattr(model, "config", None)
    try:
        h = int(cfg.hidden_size)
        layers = int(cfg.num_hidden_layers)
        inter = int(getattr(cfg, "intermediate_size", 4 * h))
        heads = int(cfg.num_attention_heads)
        kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(cfg, "head_dim", None) or h // heads)
    except (AttributeError, TypeError, ValueError):
        return 0
    kv = kv_heads * head_dim
    layer = 36 * h + 8 * kv + 8 * inter
    ckpt = checkpointed_layers(model) > 0
    if ckpt:
        counted = layers * (4 * h + 4 * kv) + 3 * layer
    else:
        parts = recomputed_parts(model)
        counted = layers * layer - parts["norm"] * 4 * h - parts["mlp"] * 2 * inter
    return int(counted * RESIDENT_PER_COUNTED[ckpt] * (1 if bf16 else FLOAT32_PER_BF16))
