"""One training step on a batch: micro-batched forward/backward, gradient clipping, optimizer step.

The loss of the whole batch is the sum of its micro-batches' losses, each scaled so that the sum
equals the loss the chosen reduction would give on the full batch (``token_mean``: by the
micro-batch's share of trained tokens; the sequence reductions: by its share of sequences).
With ``updates_per_step > 1`` the batch's logprobs before the first update are computed once
(without gradient) and every update is clipped against them, as PPO does; with one update the
old logprobs equal the current ones (detached), so the ratio is 1 and the step is the plain
policy gradient of the chosen loss.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from trainers.batch import TrainBatch
from trainers.config import TrainConfig
from trainers.kl import kl_loss
from trainers.logprobs import shared_prefix_len, token_logprobs
from trainers.losses import entropy_bonus_loss, policy_loss
from trainers.types import KLConfig, PolicyLossConfig

__all__ = ["StepStats", "train_step", "loss_config", "old_logprobs"]


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
    extra: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        return {**d, **self.extra}


def loss_config(cfg: TrainConfig) -> PolicyLossConfig:
    """The policy-loss hyperparameters of a :class:`TrainConfig`."""
    return PolicyLossConfig(
        eps_low=cfg.eps_low,
        eps_high=cfg.eps_high,
        truncated_is=cfg.truncated_is,
        reduction=cfg.reduction,
        norm_constant=float(cfg.max_turns * cfg.max_tokens_per_turn),
    )


def _micro_batches(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


@torch.no_grad()
def old_logprobs(
    model: torch.nn.Module, batch: TrainBatch, micro_batch_size: int, bf16: bool
) -> torch.Tensor:
    """Logprobs of ``batch`` under ``model`` now, without gradient, padded like the batch."""
    out_BT = torch.zeros_like(batch.mask_BT)
    for sl in _micro_batches(batch.input_ids_BT.shape[0], micro_batch_size):
        sub = batch.select(sl)
        prefix = shared_prefix_len(sub.input_ids_BT, sub.mask_BT)
        lp_BT, _ = token_logprobs(
            model, sub.input_ids_BT, sub.attention_mask_BT, bf16=bf16, prefix_len=prefix
        )
        out_BT[sl, : lp_BT.shape[1]] = lp_BT.float()
    return out_BT


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: TrainBatch,
    cfg: TrainConfig,
    *,
    ref_logprobs_fn: Any = None,
    scheduler: Any = None,
) -> StepStats:
    """Run ``cfg.updates_per_step`` optimizer updates on ``batch`` (advantages already set).

    ``ref_logprobs_fn(input_ids_BT, attention_mask_BT, prefix_len) -> logprobs_BT`` gives the
    reference model's logprobs (needed when ``cfg.kl_coef > 0``)."""
    if batch.advantages_BT is None:
        raise ValueError("set batch.advantages_BT before train_step (trainers.advantages.compute_advantages)")
    start = time.perf_counter()
    model.train()
    pcfg = loss_config(cfg)
    kcfg = KLConfig(estimator=cfg.kl_estimator, coef=cfg.kl_coef)
    B = batch.input_ids_BT.shape[0]
    total_tokens = max(batch.num_tokens, 1)
    if cfg.updates_per_step > 1 and batch.old_logprobs_BT is None:
        batch.old_logprobs_BT = old_logprobs(model, batch, cfg.micro_batch_size, cfg.bf16)
    stats = StepStats(num_tokens=batch.num_tokens, num_sequences=B)
    sums: dict[str, float] = {"policy": 0.0, "kl": 0.0, "entropy": 0.0, "clip": 0.0, "approx_kl": 0.0}
    ratio_max = 0.0
    for _ in range(cfg.updates_per_step):
        optimizer.zero_grad(set_to_none=True)
        for sl in _micro_batches(B, cfg.micro_batch_size):
            sub = batch.select(sl)
            n_tok = int(sub.mask_BT.sum())
            if n_tok == 0:
                continue
            # each micro-batch's reduced loss, scaled to its share of the full batch
            share = n_tok / total_tokens if pcfg.reduction == "token_mean" else sub.mask_BT.shape[0] / B
            # rows of a micro-batch usually share their prompt's start: run it once
            prefix = shared_prefix_len(sub.input_ids_BT, sub.mask_BT)
            logprobs_BT, entropy_BT = token_logprobs(
                model,
                sub.input_ids_BT,
                sub.attention_mask_BT,
                with_entropy=True,  # logged always; carries a gradient only for an entropy bonus
                entropy_grad=cfg.entropy_coef > 0,
                bf16=cfg.bf16,
                prefix_len=prefix,
            )
            old_BT = sub.old_logprobs_BT if sub.old_logprobs_BT is not None else logprobs_BT.detach()
            loss, pstats = policy_loss(
                cfg.loss,
                logprobs_BT,
                old_BT,
                sub.advantages_BT,
                sub.mask_BT,
                pcfg,
                rollout_logprobs_BT=sub.rollout_logprobs_BT if cfg.truncated_is else None,
            )
            sums["policy"] += pstats.loss * share
            sums["clip"] += (pstats.clip_frac_low + pstats.clip_frac_high) * n_tok
            sums["approx_kl"] += pstats.approx_kl * n_tok
            ratio_max = max(ratio_max, pstats.ratio_max)
            if cfg.kl_coef > 0:
                if ref_logprobs_fn is None:
                    raise ValueError("kl_coef > 0 needs ref_logprobs_fn (the reference model's logprobs)")
                with torch.no_grad():
                    ref_BT = ref_logprobs_fn(sub.input_ids_BT, sub.attention_mask_BT, prefix)
                kl_term, kstats = kl_loss(
                    logprobs_BT, ref_BT, sub.mask_BT, kcfg, pcfg.reduction, norm_constant=pcfg.norm_constant
                )
                loss = loss + kl_term
                sums["kl"] += kstats.kl_mean * n_tok
            ent_term, estats = entropy_bonus_loss(
                entropy_BT, sub.mask_BT, cfg.entropy_coef, pcfg.reduction, norm_constant=pcfg.norm_constant
            )
            if cfg.entropy_coef > 0:
                loss = loss + ent_term
            sums["entropy"] += estats.entropy_mean * n_tok
            (loss * share).backward()
        if cfg.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        else:
            norm = torch.sqrt(
                sum((p.grad.float() ** 2).sum() for p in model.parameters() if p.grad is not None)
            )
        stats.grad_norm = float(norm)
        optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    updates = cfg.updates_per_step
    stats.policy_loss = sums["policy"] / updates
    stats.kl = sums["kl"] / (total_tokens * updates)
    stats.entropy = sums["entropy"] / (total_tokens * updates)
    stats.clip_frac = sums["clip"] / (total_tokens * updates)
    stats.approx_kl = sums["approx_kl"] / (total_tokens * updates)
    stats.ratio_max = ratio_max
    stats.loss = stats.policy_loss
    stats.lr = float(optimizer.param_groups[0]["lr"])
    stats.seconds = time.perf_counter() - start
    stats.tokens_per_s = float(batch.attention_mask_BT.sum()) * updates / max(stats.seconds, 1e-9)
    return stats
