"""One training step on a batch: micro-batched forward/backward, gradient clipping, optimizer step.

The loss of the whole batch is the sum of its micro-batches' losses, each scaled so that the sum
equals the loss the chosen reduction would give on the full batch: each row's weight in the
reduced loss is computed once on the whole batch (:func:`trainers.losses.reduction_weights`;
``token_mean``: one over the batch's trained tokens, ``prompt_mean``: one over the prompt
count times the tokens of the row's group, ...) and each micro-batch sums its rows' weighted
losses.
With ``updates_per_step > 1`` the batch's logprobs before the first update are computed once
(without gradient) and every update is clipped against them, as PPO does; with one update the
old logprobs equal the current ones (detached), so the ratio is 1 and the step is the plain
policy gradient of the chosen loss.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from trainers.batch import TrainBatch
from trainers.config import TrainConfig
from trainers.distributed import SINGLE, DistContext
from trainers.kl import kl_loss
from trainers.logprobs import forward_logprobs, shared_prefix_len, token_logprobs
from trainers.losses import entropy_bonus_loss, policy_loss, reduction_weights, value_loss
from trainers.memory import GB, activation_bytes_per_token
from trainers.types import (
    EntropyStats,
    KLConfig,
    KLStats,
    PolicyLossConfig,
    PolicyLossStats,
    ValueLossStats,
)

__all__ = ["StepStats", "train_step", "old_logprobs", "micro_batches", "micro_batch_token_bound"]


@dataclass
class StepStats:
    """What one :func:`train_step` did (plain floats, ready for the metrics log)."""

    loss: float = 0.0
    policy_loss: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    grad_norm: float = 0.0
    clip_frac: float = 0.0
    ratio_max: float = 1.0
    approx_kl: float = 0.0
    num_tokens: int = 0
    num_sequences: int = 0
    seconds: float = 0.0
    tokens_per_s: float = 0.0
    lr: float = 0.0
    micro_batches: int = 0
    """Micro-batches per update (:func:`micro_batches`): the most of any rank (FSDP2's dummy
    passes not counted)."""
    micro_batch_tokens: int = 0
    """The bound on a micro-batch's computed tokens (:func:`micro_batch_token_bound`; 0: none)."""
    extra: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        return {**d, **self.extra}


def micro_batches(
    batch: TrainBatch, size: int, max_tokens: int = 0, shared_prefix: bool = True
) -> list[slice]:
    """Consecutive row slices of ``batch``: each at most ``size`` rows and, when ``max_tokens``
    > 0, at most ``max_tokens`` tokens computed (its shared prefix once, then every row's real
    tokens after it, as :func:`trainers.logprobs.forward_logprobs` runs them; every row's whole
    length without ``shared_prefix``); a row over the bound alone is a slice of its own."""
    n = batch.input_ids_BT.shape[0]
    if max_tokens <= 0:
        return [slice(i, min(i + size, n)) for i in range(0, n, size)]
    lengths = batch.attention_mask_BT.sum(dim=1).tolist()
    out: list[slice] = []
    start = 0
    while start < n:
        end = start + 1
        while end < n and end - start < size:
            sub = batch.select(slice(start, end + 1))
            prefix = shared_prefix_len(sub.input_ids_BT, sub.mask_BT) if shared_prefix else 0
            computed = prefix + sum(max(int(L) - prefix, 0) for L in lengths[start : end + 1])
            if computed > max_tokens:
                break
            end += 1
        out.append(slice(start, end))
        start = end
    return out


def _fsdp_clip(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip FSDP2's sharded gradients by the norm of the whole gradient (``max_norm`` 0: only
    measure): the squares of each rank's disjoint shards, summed with one ``all_reduce``."""
    local_sq = torch.zeros((), dtype=torch.float64, device=params[0].device if params else "cpu")
    for p in params:
        if p.grad is not None:
            g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            local_sq = local_sq + g.double().square().sum()
    torch.distributed.all_reduce(local_sq)
    norm = local_sq.sqrt().float()
    if max_norm > 0:
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for p in params:
            if p.grad is not None:
                p.grad.mul_(coef.to(p.grad.device))
    return norm


def micro_batch_token_bound(model: torch.nn.Module, cfg: TrainConfig) -> int:
    """The most tokens a micro-batch of ``model``'s train step computes: ``micro_batch_tokens``,
    or fewer where ``train_memory_gb`` holds fewer at
    :func:`trainers.memory.activation_bytes_per_token` each (0: no bound)."""
    bound = cfg.optimizer.micro_batch_tokens
    if cfg.optimizer.train_memory_gb > 0:
        per_token = activation_bytes_per_token(model, bf16=cfg.model.bf16)
        if per_token > 0:
            fits = max(1, int(cfg.optimizer.train_memory_gb * GB // per_token))
            bound = min(bound, fits) if bound > 0 else fits
    return bound


def _lockstep_micro_batches(
    batch: TrainBatch, size: int, max_tokens: int, dist: DistContext
) -> list[slice | None]:
    """This rank's micro-batches of ``batch`` (:func:`micro_batches`); with FSDP2 padded with
    ``None`` (a dummy pass) to the largest count of any rank, since every rank must run the same
    number of forwards and backwards."""
    mbs: list[slice | None] = list(micro_batches(batch, size, max_tokens, shared_prefix=not dist.fsdp))
    if dist.fsdp and dist.enabled:
        mbs += [None] * (max(dist.all_gather_objects(len(mbs))) - len(mbs))
    return mbs


@torch.no_grad()
def old_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    micro_batch_size: int,
    bf16: bool,
    fused_head: bool = True,
    dist: DistContext = SINGLE,
    filler: TrainBatch | None = None,
    micro_batch_tokens: int = 0,
    slices: Sequence[slice | None] | None = None,
) -> torch.Tensor:
    """Logprobs of ``batch``'s trained tokens under ``model`` now (0 elsewhere), without gradient,
    padded like the batch, in micro-batches of at most ``micro_batch_size`` rows and
    ``micro_batch_tokens`` computed tokens (:func:`micro_batches`; ``slices``: a split of the
    batch already made that way, reused). With FSDP2, ``filler`` (any one-row batch) feeds the
    dummy passes."""
    out_BT = torch.zeros_like(batch.mask_BT)
    if slices is None:
        slices = _lockstep_micro_batches(batch, micro_batch_size, micro_batch_tokens, dist)
    for sl in slices:
        if sl is None:  # FSDP2: keep the collectives in step with the other ranks
            assert filler is not None
            token_logprobs(model, filler.input_ids_BT, filler.attention_mask_BT, bf16=bf16, fused_head=False)
            continue
        sub = batch.select(sl)
        # FSDP2: a shared-prefix pass is one more forward, which the other ranks might not run
        prefix = 0 if dist.fsdp else shared_prefix_len(sub.input_ids_BT, sub.mask_BT)
        lp_BT, _ = token_logprobs(
            model,
            sub.input_ids_BT,
            sub.attention_mask_BT,
            bf16=bf16,
            prefix_len=prefix,
            mask_BT=sub.mask_BT,
            fused_head=fused_head,
        )
        out_BT[sl, : lp_BT.shape[1]] = lp_BT.float()
    return out_BT


class _MicroBatchStats(NamedTuple):
    """The stats records of one micro-batch's loss terms (``None``: that term is off)."""

    policy: PolicyLossStats
    kl: KLStats | None
    entropy: EntropyStats
    value: ValueLossStats | None


def _micro_batch_loss(
    model: torch.nn.Module,
    sub: TrainBatch,
    cfg: TrainConfig,
    pcfg: PolicyLossConfig,
    kcfg: KLConfig,
    ref_logprobs_fn: Any,
    critic: torch.nn.Module | None,
    dist: DistContext,
    weights_B: torch.Tensor,
) -> tuple[torch.Tensor, _MicroBatchStats]:
    """One micro-batch's loss (policy + KL + entropy bonus + value terms) and the stats of each
    term. ``weights_B`` are its rows' reduction weights computed on the whole batch
    (:func:`trainers.losses.reduction_weights`), so the micro-batches' losses add up to the
    whole batch's."""
    # rows of a micro-batch usually share their prompt's start: run it once (not under
    # FSDP2, where it is one more forward that other ranks might not run)
    prefix = 0 if dist.fsdp else shared_prefix_len(sub.input_ids_BT, sub.mask_BT)
    out = forward_logprobs(
        model,
        sub.input_ids_BT,
        sub.attention_mask_BT,
        mask_BT=sub.mask_BT,  # the LM head runs only where a trained token is predicted
        with_entropy=True,  # logged always; carries a gradient only for an entropy bonus
        entropy_grad=cfg.algorithm.entropy_coef > 0,
        bf16=cfg.model.bf16,
        prefix_len=prefix,
        value_head=critic,
        fused_head=cfg.optimizer.fused_head,
    )
    logprobs_BT, entropy_BT = out.logprobs_BT, out.entropy_BT
    old_BT = sub.old_logprobs_BT if sub.old_logprobs_BT is not None else logprobs_BT.detach()
    loss, pstats = policy_loss(
        cfg.algorithm.loss,
        logprobs_BT,
        old_BT,
        sub.advantages_BT,
        sub.mask_BT,
        pcfg,
        rollout_logprobs_BT=sub.rollout_logprobs_BT if pcfg.truncated_is else None,
        weights_B=weights_B,
    )
    kstats = None
    if kcfg.coef > 0:
        if ref_logprobs_fn is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs_fn (the reference model's logprobs)")
        with torch.no_grad():
            ref_BT = ref_logprobs_fn(sub.input_ids_BT, sub.attention_mask_BT, prefix, sub.mask_BT)
        kl_term, kstats = kl_loss(logprobs_BT, ref_BT, sub.mask_BT, kcfg, pcfg.reduction, weights_B=weights_B)
        loss = loss + kl_term
    ent_term, estats = entropy_bonus_loss(
        entropy_BT, sub.mask_BT, cfg.algorithm.entropy_coef, pcfg.reduction, weights_B=weights_B
    )
    if cfg.algorithm.entropy_coef > 0:
        loss = loss + ent_term
    vstats = None
    if critic is not None:
        assert out.values_BT is not None and sub.returns_BT is not None
        v_term, vstats = value_loss(
            out.values_BT,
            sub.old_values_BT,
            sub.returns_BT,
            sub.mask_BT,
            clip_eps=cfg.algorithm.value_clip,
            reduction=pcfg.reduction,
            weights_B=weights_B,
        )
        loss = loss + cfg.algorithm.value_coef * v_term
    return loss, _MicroBatchStats(pstats, kstats, estats, vstats)


def _stat_keys(truncated_is: bool, critic: bool) -> list[str]:
    """The sums :func:`train_step` keeps, in a fixed order (the order of the all-reduce)."""
    keys = ["policy", "kl", "entropy", "clip", "approx_kl"]
    if truncated_is:
        keys += ["tis_weight", "rollout_kl"]
    if critic:
        keys += ["value_loss", "value_clip", "explained_variance"]
    return keys


def _micro_batch_sums(stats: _MicroBatchStats, share: float, n_tok: int) -> dict[str, float]:
    """One micro-batch's contribution to the step's sums (pure): losses weighted by the
    micro-batch's ``share`` of the whole batch (so they add up to the batch's loss), per-token
    means weighted by its ``n_tok`` trained tokens (divided by the batch's tokens at the end, in
    :func:`_step_stats`). The KL and value terms only when they are on; the caller keeps the
    keys of :func:`_stat_keys`."""
    p = stats.policy
    out = {
        "policy": p.loss * share,
        "clip": (p.clip_frac_low + p.clip_frac_high) * n_tok,
        "approx_kl": p.approx_kl * n_tok,
        "entropy": stats.entropy.entropy_mean * n_tok,
        "tis_weight": p.tis_weight_mean * n_tok,
        "rollout_kl": (p.rollout_kl or 0.0) * n_tok,
    }
    if stats.kl is not None:
        out["kl"] = stats.kl.kl_mean * n_tok
    if stats.value is not None:
        out["value_loss"] = stats.value.loss * share
        out["value_clip"] = stats.value.clip_frac * n_tok
        out["explained_variance"] = stats.value.explained_variance * n_tok
    return out


def _step_stats(
    sums: dict[str, float],
    *,
    ratio_max: float,
    updates: int,
    num_tokens: int,
    num_sequences: int,
    grad_norm: float,
    lr: float,
    seconds: float,
    attended_tokens: float,
) -> StepStats:
    """The :class:`StepStats` of a step (pure) from the sums of :func:`_micro_batch_sums` over
    every micro-batch of every update (and over ranks): losses are means over updates, per-token
    stats means over the ``num_tokens`` trained tokens of every update."""
    total_tokens = max(num_tokens, 1)
    per_token = total_tokens * updates
    stats = StepStats(num_tokens=num_tokens, num_sequences=num_sequences, grad_norm=grad_norm)
    stats.policy_loss = sums["policy"] / updates
    stats.kl = sums["kl"] / per_token
    stats.entropy = sums["entropy"] / per_token
    stats.clip_frac = sums["clip"] / per_token
    stats.approx_kl = sums["approx_kl"] / per_token
    stats.ratio_max = ratio_max
    stats.loss = stats.policy_loss
    stats.lr = lr
    stats.seconds = seconds
    if "tis_weight" in sums:  # how far the sampler's logprobs were from the trainer's
        stats.extra["tis_weight_mean"] = sums["tis_weight"] / per_token
        stats.extra["rollout_kl"] = sums["rollout_kl"] / per_token
    if "value_loss" in sums:
        stats.extra["value_loss"] = sums["value_loss"] / updates
        stats.extra["value_clip_frac"] = sums["value_clip"] / per_token
        stats.extra["explained_variance"] = sums["explained_variance"] / per_token
    stats.tokens_per_s = attended_tokens * updates / max(seconds, 1e-9)
    return stats


def _apply_update(
    optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], grad_clip: float, dist: DistContext
) -> float:
    """Sum the gradients over ranks, clip them to ``grad_clip`` (0: only measure), step the
    optimizer; return the gradient norm before clipping."""
    dist.all_reduce_gradients(params)  # sum over ranks: the whole batch's gradient
    if dist.fsdp:  # sharded gradients: the norm of the whole gradient, then scale
        sharded = [p for group in optimizer.param_groups for p in group["params"]]
        norm = _fsdp_clip(sharded, grad_clip)
    elif grad_clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    else:
        norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in params if p.grad is not None))
    optimizer.step()
    return float(norm)


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: TrainBatch,
    cfg: TrainConfig,
    *,
    ref_logprobs_fn: Any = None,
    scheduler: Any = None,
    dist: DistContext = SINGLE,
    critic: torch.nn.Module | None = None,
) -> StepStats:
    """Run ``cfg.optimizer.updates_per_step`` optimizer updates on ``batch`` (advantages already set).

    ``ref_logprobs_fn(input_ids_BT, attention_mask_BT, prefix_len, mask_BT) -> logprobs_BT``
    gives the reference model's logprobs (needed when ``cfg.algorithm.kl_coef > 0``).

    ``critic`` (a :class:`trainers.critic.ValueHead`, with ``advantage="gae"``): its clipped value
    loss against ``batch.returns_BT`` (:func:`trainers.losses.value_loss`), times
    ``cfg.algorithm.value_coef``, joins the loss; the optimizer must hold its parameters too.

    Data parallel (``dist.world_size > 1``): every rank passes the same whole ``batch`` and
    trains on its contiguous shard of the sequences; each micro-batch's loss is scaled by its
    share of the whole batch, the gradients are summed over ranks before clipping, so every rank
    applies the full batch's update (see :mod:`trainers.distributed`). The stats are the whole
    batch's on every rank."""
    if batch.advantages_BT is None:
        raise ValueError("set batch.advantages_BT before train_step (trainers.advantages.compute_advantages)")
    if critic is not None and (batch.returns_BT is None or batch.old_values_BT is None):
        raise ValueError("a critic needs batch.returns_BT and batch.old_values_BT (see trainers.critic)")
    start = time.perf_counter()
    batch = batch.to(next(model.parameters()).device)
    model.train()
    pcfg, kcfg = cfg.loss_config, cfg.kl_config
    B = batch.input_ids_BT.shape[0]  # sequences in the whole batch (all ranks)
    # every row's weight in the whole batch's reduced loss (exact for any micro-batch split)
    weights_B = batch.loss_weight * reduction_weights(
        batch.mask_BT, pcfg.reduction, group_ids_B=batch.group_ids_B, norm_constant=pcfg.norm_constant
    )
    local = batch.select(dist.shard(B)) if dist.enabled else batch  # this rank's rows
    local_weights_B = weights_B[dist.shard(B)] if dist.enabled else weights_B
    B_local = local.input_ids_BT.shape[0]
    # FSDP2 divides the reduced gradients by the world size; our shares already sum to 1
    loss_scale = float(dist.world_size) if dist.fsdp else 1.0
    filler = batch.select(slice(0, 1))  # FSDP2's dummy passes run on it, with weight 0
    # one split for the old logprobs and every update (with FSDP2 it also takes an all-gather)
    max_tokens = micro_batch_token_bound(model, cfg)
    slices = _lockstep_micro_batches(local, cfg.optimizer.micro_batch_size, max_tokens, dist)
    if cfg.optimizer.updates_per_step > 1 and local.old_logprobs_BT is None and (B_local or dist.fsdp):
        local.old_logprobs_BT = old_logprobs(
            model,
            local,
            cfg.optimizer.micro_batch_size,
            cfg.model.bf16,
            cfg.optimizer.fused_head,
            dist=dist,
            filler=filler,
            micro_batch_tokens=max_tokens,
            slices=slices,
        )
    sums = dict.fromkeys(_stat_keys(pcfg.truncated_is, critic is not None), 0.0)
    ratio_max, grad_norm = 0.0, 0.0
    # (with FSDP2 the root module's parameters can be its unsharded copies here; the optimizer
    # holds the sharded ones, which get the gradients: see _apply_update)
    params = [p for p in model.parameters() if p.requires_grad]
    if critic is not None:
        params += [p for p in critic.parameters() if p.requires_grad]
    for _ in range(cfg.optimizer.updates_per_step):
        optimizer.zero_grad(set_to_none=True)
        for sl in slices:
            sub = filler if sl is None else local.select(sl)
            n_tok = int(sub.mask_BT.sum())
            if n_tok == 0 and not dist.fsdp:
                continue
            # the reduction weights already make each micro-batch's loss its part of the whole
            share, sub_weights_B = 1.0, None if sl is None else local_weights_B[sl]
            if sl is None:  # FSDP2 only: a pass with weight 0, to keep collectives in step
                share, n_tok = 0.0, 0
                sub.old_logprobs_BT = None
                sub_weights_B = torch.zeros(1, device=weights_B.device)
            loss, mstats = _micro_batch_loss(
                model, sub, cfg, pcfg, kcfg, ref_logprobs_fn, critic, dist, sub_weights_B
            )
            for key, value in _micro_batch_sums(mstats, share, n_tok).items():
                if key in sums:
                    sums[key] += value
            ratio_max = max(ratio_max, mstats.policy.ratio_max)
            (loss * (share * loss_scale)).backward()
        grad_norm = _apply_update(optimizer, params, cfg.optimizer.grad_clip, dist)
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    n_micro = sum(1 for sl in slices if sl is not None)
    if dist.enabled:  # every rank reports the whole batch
        keys = list(sums)
        sums = dict(zip(keys, dist.all_reduce_sum([sums[k] for k in keys]), strict=True))
        gathered = dist.all_gather_objects((ratio_max, n_micro))
        ratio_max, n_micro = max(r for r, _ in gathered), max(n for _, n in gathered)
    stats = _step_stats(
        sums,
        ratio_max=ratio_max,
        updates=cfg.optimizer.updates_per_step,
        num_tokens=batch.num_tokens,
        num_sequences=B,
        grad_norm=grad_norm,
        lr=float(optimizer.param_groups[0]["lr"]),
        seconds=time.perf_counter() - start,
        attended_tokens=float(batch.attention_mask_BT.sum()),
    )
    stats.micro_batches, stats.micro_batch_tokens = n_micro, max_tokens
    return stats
