"""Trajectories to padded training tensors, without re-tokenizing anything.

Layout: one row per trajectory, ``input_ids_BT = prompt_ids + response_ids`` right-padded to the
longest sequence. ``mask_BT`` is 1 exactly at positions of tokens the policy sampled (the
trajectory's ``loss_mask`` shifted past the prompt) and 0 on prompt, observation and padding
tokens. The logprob of token ``t`` is read from the logits at ``t - 1``, so all per-token tensors
(``rollout_logprobs_BT``, ``token_rewards_BT``) are aligned with ``input_ids_BT``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from skyrl_agent.types import Trajectory

__all__ = ["TrainBatch", "collate"]


@dataclass
class TrainBatch:
    """Padded tensors for one training batch (B sequences of at most T tokens)."""

    input_ids_BT: torch.Tensor
    """Token ids, right-padded with ``pad_id``."""
    attention_mask_BT: torch.Tensor
    """1 on real tokens, 0 on padding."""
    mask_BT: torch.Tensor
    """1 on tokens the policy sampled (trained on), 0 elsewhere."""
    rollout_logprobs_BT: torch.Tensor | None
    """Sampler's logprob of each sampled token (0 elsewhere); None if any trajectory lacks them."""
    token_rewards_BT: torch.Tensor
    """Each turn's reward at that turn's last sampled token."""
    rewards_B: torch.Tensor
    """Total reward per trajectory."""
    group_ids_B: torch.Tensor
    """GRPO group of each trajectory (same prompt, same group)."""
    advantages_BT: torch.Tensor | None = None
    """Advantages per token, once computed (zero where ``mask_BT`` is 0)."""
    old_logprobs_BT: torch.Tensor | None = None
    """Logprobs under the policy before this step's first update (for several updates per batch)."""
    old_values_BT: torch.Tensor | None = None
    """The critic's values when the batch was scored (GAE; the value loss clips against them)."""
    returns_BT: torch.Tensor | None = None
    """The critic's targets (GAE: advantages plus old values)."""
    loss_weight: float = 1.0
    """The whole batch's loss is multiplied by this: its rows' share of what the loss's mean
    counts when left-out equal-reward groups still count (``group_filter="skip_counted"``)."""

    @property
    def num_tokens(self) -> int:
        """Trained tokens in the batch."""
        return int(self.mask_BT.sum())

    def to(self, device: torch.device | str) -> TrainBatch:
        """The same batch with every tensor on ``device`` (``self`` when already there)."""
        device = torch.device(device)
        if self.input_ids_BT.device == device:
            return self
        return TrainBatch(
            **{
                f.name: (v.to(device) if isinstance(v, torch.Tensor) else v)
                for f in dataclasses.fields(self)
                for v in [getattr(self, f.name)]
            }
        )

    def select(self, idx: torch.Tensor | slice) -> TrainBatch:
        """The rows ``idx`` (for micro-batches), trimmed to their longest real sequence."""
        attn = self.attention_mask_BT[idx]
        t = int(attn.sum(dim=1).max()) if attn.numel() else 0

        def cut(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x[idx][:, :t]

        return TrainBatch(
            input_ids_BT=self.input_ids_BT[idx][:, :t],
            attention_mask_BT=attn[:, :t],
            mask_BT=self.mask_BT[idx][:, :t],
            rollout_logprobs_BT=None
            if self.rollout_logprobs_BT is None
            else self.rollout_logprobs_BT[idx][:, :t],
            token_rewards_BT=self.token_rewards_BT[idx][:, :t],
            rewards_B=self.rewards_B[idx],
            group_ids_B=self.group_ids_B[idx],
            advantages_BT=cut(self.advantages_BT),
            old_logprobs_BT=cut(self.old_logprobs_BT),
            old_values_BT=cut(self.old_values_BT),
            returns_BT=cut(self.returns_BT),
            loss_weight=self.loss_weight,
        )


def collate(trajectories: Sequence[Trajectory], pad_id: int) -> TrainBatch:
    """Pad ``trajectories`` into a :class:`TrainBatch`. Masked trajectories must be dropped first."""
    if not trajectories:
        raise ValueError("collate() needs at least one trajectory")
    bad = [t for t in trajectories if t.masked]
    if bad:
        raise ValueError(
            f"{len(bad)} masked trajectories passed to collate(); drop them (they carry no reward)"
        )
    B = len(trajectories)
    T = max(len(t.prompt_ids) + len(t.response_ids) for t in trajectories)
    input_ids_BT = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask_BT = torch.zeros((B, T), dtype=torch.long)
    mask_BT = torch.zeros((B, T), dtype=torch.float32)
    token_rewards_BT = torch.zeros((B, T), dtype=torch.float32)
    has_logprobs = all(t.rollout_logprobs is not None for t in trajectories)
    rollout_BT = torch.zeros((B, T), dtype=torch.float32) if has_logprobs else None
    for b, traj in enumerate(trajectories):
        p, r = len(traj.prompt_ids), len(traj.response_ids)
        input_ids_BT[b, : p + r] = torch.tensor(traj.prompt_ids + traj.response_ids, dtype=torch.long)
        attention_mask_BT[b, : p + r] = 1
        mask_BT[b, p : p + r] = torch.tensor(traj.loss_mask, dtype=torch.float32)
        token_rewards_BT[b, p : p + r] = torch.tensor(traj.token_rewards, dtype=torch.float32)
        if rollout_BT is not None:
            rollout_BT[b, p : p + r] = torch.tensor(traj.rollout_logprobs, dtype=torch.float32)
    return TrainBatch(
        input_ids_BT=input_ids_BT,
        attention_mask_BT=attention_mask_BT,
        mask_BT=mask_BT,
        rollout_logprobs_BT=rollout_BT,
        token_rewards_BT=token_rewards_BT,
        rewards_B=torch.tensor([float(t.reward) for t in trajectories]),
        group_ids_B=torch.tensor([int(t.group_id) for t in trajectories], dtype=torch.long),
    )
