"""The critic for PPO with GAE: a value head on the policy's trunk, and scoring a batch with it.

The value head is one linear layer from the policy's final hidden state to a scalar, read at the
same position as the logits that predict token ``t`` (so ``values_BT[:, t]`` is the value of the
state in which token ``t`` was generated, as :func:`trainers.advantages.gae_advantages` expects).
It shares the trunk with the policy (one forward pass serves both; the value loss also shapes
the trunk, as in PPO's shared-network Atari set-up); it starts at zero, so the first advantages
are the plain returns and the trunk gets no gradient from the critic until the head has learned.
"""

from __future__ import annotations

import torch
from torch import nn

from trainers.batch import TrainBatch
from trainers.logprobs import forward_logprobs, shared_prefix_len

__all__ = ["ValueHead", "score_values"]


class ValueHead(nn.Module):
    """``value = w . h + b`` on the trunk's final hidden state ``h`` (float32)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden_NH: torch.Tensor) -> torch.Tensor:
        """``N x H`` hidden states to ``N x 1`` values."""
        return self.linear(hidden_NH.to(self.linear.weight.dtype))


@torch.no_grad()
def score_values(
    model: nn.Module, value_head: ValueHead, batch: TrainBatch, micro_batch_size: int, bf16: bool
) -> torch.Tensor:
    """The critic's values of ``batch`` at its trained tokens (0 elsewhere), ``B x T``, no gradient."""
    out_BT = torch.zeros_like(batch.mask_BT)
    for s in range(0, batch.input_ids_BT.shape[0], micro_batch_size):
        sl = slice(s, s + micro_batch_size)
        sub = batch.select(sl)
        out = forward_logprobs(
            model,
            sub.input_ids_BT,
            sub.attention_mask_BT,
            mask_BT=sub.mask_BT,
            bf16=bf16,
            prefix_len=shared_prefix_len(sub.input_ids_BT, sub.mask_BT),
            value_head=value_head,
        )
        assert out.values_BT is not None
        out_BT[sl, : out.values_BT.shape[1]] = out.values_BT
    return out_BT
