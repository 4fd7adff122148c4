"""Data-parallel training with ``torch.distributed``: who am I, my shard, and summed gradients.

Launched with ``torchrun --nproc_per_node N -m trainers.cli train ...`` (or ``skyrl train``
under ``torchrun``), every process runs the same loop:

1. every rank draws the same prompts (the sampler is replicated) and rolls out its contiguous
   shard of them with its own copy of the policy;
2. the trajectories are all-gathered, so every rank holds the whole batch and computes the same
   advantages (group baselines and batch whitening see every sample);
3. every rank runs forward/backward on its contiguous shard of the batch's sequences, each
   micro-batch's loss scaled by its share of the *whole* batch (tokens or sequences), so the
   gradients summed over ranks are exactly the full batch's gradient;
4. gradients are summed with ``all_reduce`` (CPU: gloo; bucketed), then clipped and applied
   identically on every rank, so the weights stay equal without a broadcast;
5. rank 0 alone writes logs, trajectories, checkpoints and plots.

On CUDA with NCCL (or with ``fsdp=True`` on gloo, which runs the same code on CPU and is how the
tests check it) the model is sharded with FSDP2 (``torch.distributed.fsdp.fully_shard``) instead
of replicated. FSDP2 reduce-scatters gradients itself and divides them by the world size, which
the train step undoes by scaling the loss by ``world_size``; every rank runs the same number of
forward/backward passes (ranks with fewer micro-batches run weight-0 filler passes), since each
pass is a collective; the logprobs take the full-logits path through the root module's forward.
The NCCL variant has a ``gpu``-marked test and has not run on GPUs yet.

A run without ``WORLD_SIZE`` in its environment (or with ``WORLD_SIZE=1``) uses none of this:
:func:`init_distributed` returns :data:`SINGLE`, whose methods are no-ops.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

import torch

from skyrl_gym.errors import ConfigError

__all__ = [
    "DistContext",
    "SINGLE",
    "exit_rank",
    "init_distributed",
    "resolve_device",
    "shard_slice",
    "DistBackend",
]

DistBackend = Literal["auto", "gloo", "nccl"]

_BUCKET_ELEMENTS = 32 * 1024 * 1024  # gradients are summed in flat buckets of at most this many floats


def shard_slice(n: int, rank: int, world_size: int) -> slice:
    """The contiguous part of ``range(n)`` that ``rank`` of ``world_size`` owns (sizes differ by at
    most one; a rank may own nothing when ``n < world_size``)."""
    return slice(rank * n // world_size, (rank + 1) * n // world_size)


@dataclass(frozen=True)
class DistContext:
    """This process's place in a data-parallel run (``world_size == 1``: a plain single process)."""

    rank: int = 0
    """Global rank, 0 .. world_size - 1."""
    world_size: int = 1
    """Number of processes."""
    local_rank: int = 0
    """Rank on this machine (picks the GPU)."""
    backend: str | None = None
    """``"gloo"`` or ``"nccl"`` when a process group is up, else ``None``."""
    fsdp: bool = False
    """True when the model is sharded with FSDP2 (NCCL on CUDA) instead of replicated."""
    single_device: str = "cpu"
    """Where a single-process run (no process group) puts its model: ``"cpu"`` or ``"cuda"``."""

    @property
    def enabled(self) -> bool:
        """True when there is more than one process."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0, the process that logs and checkpoints."""
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        """Where this rank's model lives."""
        if self.backend == "nccl":
            return torch.device("cuda", self.local_rank)
        return torch.device(self.single_device) if self.backend is None else torch.device("cpu")

    def shard(self, n: int) -> slice:
        """This rank's contiguous slice of ``n`` items (see :func:`shard_slice`)."""
        return shard_slice(n, self.rank, self.world_size)

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.enabled:
            torch.distributed.barrier()

    def all_gather_objects(self, obj: Any) -> list[Any]:
        """``[obj of rank 0, obj of rank 1, ...]`` on every rank (pickled; for trajectories and stats)."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(out, obj)
        return out

    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum of ``values`` over ranks."""
        if not self.enabled:
            return list(values)
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(t)
        return t.tolist()

    def broadcast_parameters(self, module: torch.nn.Module) -> None:
        """Copy rank 0's parameters and buffers to every rank (a replicated model starts equal)."""
        if not self.enabled or self.fsdp:
            return
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                torch.distributed.broadcast(t.data, src=0)

    def all_reduce_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Sum the ``.grad`` of ``params`` over ranks, in place (a rank without a gradient for a
        parameter contributes zeros). Each rank has scaled its loss by its share of the whole
        batch, so the sum is the full batch's gradient. No-op with FSDP (it reduces itself)."""
        if not self.enabled or self.fsdp:
            return
        params = [p for p in params if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        bucket: list[torch.Tensor] = []
        size = 0
        for p in params:
            bucket.append(p.grad)
            size += p.grad.numel()
            if size >= _BUCKET_ELEMENTS:
                _reduce_bucket(bucket)
                bucket, size = [], 0
        if bucket:
            _reduce_bucket(bucket)

    def parameters_in_sync(self, module: torch.nn.Module) -> bool:
        """True when every rank holds exactly the same parameters (compared by a float64 checksum
        of each tensor). A cheap check that data parallelism kept the replicas equal."""
        if not self.enabled or self.fsdp:
            return True
        with torch.no_grad():
            sums = torch.stack([p.detach().double().sum() for p in module.parameters()]).cpu()
        gathered = self.all_gather_objects(sums)
        return all(torch.equal(gathered[0], g) for g in gathered[1:])

    def close(self, sync: bool = True) -> None:
        """Tear down the process group (idempotent).

        ``sync=True`` (a rank that finished normally) waits at a barrier first, so no rank closes
        its connections while a peer is still inside the last collective; a rank leaving on an
        error passes ``sync=False`` and does not wait for peers that may never arrive."""
        if self.backend is not None and torch.distributed.is_initialized():
            if sync and self.enabled:
                torch.distributed.barrier()
            torch.distributed.destroy_process_group()


def _reduce_bucket(grads: list[torch.Tensor]) -> None:
    flat = torch.cat([g.reshape(-1) for g in grads])  # one collective for many small tensors
    torch.distributed.all_reduce(flat)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def exit_rank(code: int = 0) -> NoReturn:
    """End a ``torchrun`` worker process after its work is done and its process group closed.

    Runs the ``atexit`` handlers (sandbox reapers, the sampler engine's shutdown), flushes
    stdout and stderr, then leaves with :func:`os._exit`, skipping the interpreter's own
    finalisation. Reason: on CPU, torch's gloo threads intermittently abort a finished rank
    during that finalisation ("terminate called without an active exception", SIGABRT; seen in
    2 of 6 CI runs of the two-rank tests with torch 2.13), turning a run whose outputs were all
    written into a failed one. Nothing of ours runs in that phase."""
    import atexit
    import sys

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing more to say
            pass
    os._exit(code)


def resolve_device(device: str) -> str:
    """``"auto"`` -> ``"cuda"`` when CUDA is available, else ``"cpu"``; ``"cuda"`` without CUDA
    raises :class:`ConfigError`; ``"cpu"`` stays."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda needs a CUDA GPU and a CUDA build of torch; use --device cpu")
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"unknown device {device!r}; choose 'auto', 'cpu' or 'cuda'")
    return device


SINGLE = DistContext()
"""The context of a plain single-process run."""


def init_distributed(
    backend: DistBackend = "auto", timeout_s: float = 1800.0, fsdp: bool | None = None
) -> DistContext:
    """Join the process group ``torchrun`` describes (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...).

    ``backend="auto"``: NCCL when CUDA is available, else gloo. ``fsdp``: shard the model with
    FSDP2 (``None``: with NCCL yes, with gloo no; FSDP2 on gloo runs on CPU). Without
    ``WORLD_SIZE`` > 1 in the environment this starts nothing and returns :data:`SINGLE`.
    ``timeout_s`` bounds every collective, so a rank that died never hangs the others forever."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return SINGLE
    if backend not in ("auto", "gloo", "nccl"):
        raise ConfigError(f"unknown dist backend {backend!r}; choose 'auto', 'gloo' or 'nccl'")
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("--dist-backend nccl needs CUDA GPUs; use gloo on CPU")
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(
            backend=backend,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return DistContext(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        backend=backend,
        fsdp=(backend == "nccl") if fsdp is None else fsdp,
    )


def shard_model_fsdp2(model: torch.nn.Module, ctx: DistContext) -> torch.nn.Module:
    """Shard ``model`` with FSDP2 on ``ctx.device``: every decoder layer, then the root (GPU path).

    Needs torch >= 2.6 (``torch.distributed.fsdp.fully_shard``) and a CUDA process group."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError as exc:  # pragma: no cover - old torch
        raise ConfigError("FSDP2 needs torch >= 2.6 (torch.distributed.fsdp.fully_shard)") from exc
    model.to(ctx.device)
    layers = getattr(getattr(model, "model", model), "layers", None)
    if layers is None and hasattr(model, "get_decoder"):
        layers = getattr(model.get_decoder(), "layers", None)
    for layer in layers or []:
        fully_shard(layer)
    fully_shard(model)
    return model


def full_state_dict(model: torch.nn.Module, ctx: DistContext) -> dict[str, torch.Tensor]:
    """The whole (unsharded) state dict on every rank: plain ``state_dict()`` unless FSDP2 shards it."""
    if not ctx.fsdp:
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))
