"""Per-token log-probabilities (and entropies) of given sequences under a causal LM."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from trainers.losses import entropy_from_logits, token_logprobs_from_logits

__all__ = ["token_logprobs", "autocast_context"]


def autocast_context(bf16: bool, device: torch.device | str = "cpu") -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` when ``bf16`` is set, else a no-op context."""
    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def token_logprobs(
    model: torch.nn.Module,
    input_ids_BT: torch.Tensor,
    attention_mask_BT: torch.Tensor,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    bf16: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``logprobs_BT[b, t] = log p(input_ids[b, t] | input_ids[b, :t])`` (0 at ``t = 0``).

    Computed in float32 from the logits, in chunks, never materializing ``B x T x V`` float32
    buffers (under bf16 autocast the matmuls run in bf16). With ``with_entropy`` also returns
    the entropy of each position's next-token distribution, aligned the same way (carrying a
    gradient only with ``entropy_grad``). Gradients flow
    unless called under ``torch.no_grad``.
    """
    with autocast_context(bf16, input_ids_BT.device):
        logits_BTV = model(input_ids=input_ids_BT, attention_mask=attention_mask_BT).logits
    logits_BTV = logits_BTV[:, :-1]  # B x (T-1) x V: predicts tokens 1..T-1
    picked_BT = token_logprobs_from_logits(logits_BTV, input_ids_BT[:, 1:])  # B x (T-1), float32
    logprobs_BT = F.pad(picked_BT, (1, 0))  # B x T, position 0 has no prediction
    entropy_BT = None
    if with_entropy:  # with gradient only when asked (an entropy bonus); else just for logging
        source_BTV = logits_BTV if entropy_grad else logits_BTV.detach()
        entropy_BT = F.pad(entropy_from_logits(source_BTV), (1, 0))  # B x T
    return logprobs_BT, entropy_BT
