"""Per-token log-probabilities (and entropies) of given sequences under a causal LM."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from skyrl_agent.models import cache_kwarg, output_cache
from trainers.losses import entropy_from_logits, token_logprobs_from_logits

__all__ = ["token_logprobs", "autocast_context", "shared_prefix_len"]


def autocast_context(bf16: bool, device: torch.device | str = "cpu") -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` when ``bf16`` is set, else a no-op context."""
    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def shared_prefix_len(input_ids_BT: torch.Tensor, mask_BT: torch.Tensor) -> int:
    """How many leading tokens every row shares and none trains on (a common system prompt).

    ``token_logprobs(prefix_len=...)`` computes them once instead of once per row."""
    same_T = (input_ids_BT == input_ids_BT[:1]).all(dim=0)  # T: column identical in every row
    lcp = int(same_T.long().cumprod(0).sum())
    trained_T = mask_BT.bool().any(dim=0)  # T
    first_trained = int(trained_T.long().argmax()) if bool(trained_T.any()) else input_ids_BT.shape[1]
    return min(lcp, first_trained)


def token_logprobs(
    model: torch.nn.Module,
    input_ids_BT: torch.Tensor,
    attention_mask_BT: torch.Tensor,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    bf16: bool = False,
    prefix_len: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``logprobs_BT[b, t] = log p(input_ids[b, t] | input_ids[b, :t])`` (0 at ``t = 0``).

    Computed in float32 from the logits, in chunks, never materializing ``B x T x V`` float32
    buffers (under bf16 autocast the matmuls run in bf16). With ``with_entropy`` also returns
    the entropy of each position's next-token distribution, aligned the same way (carrying a
    gradient only with ``entropy_grad``). Gradients flow unless called under ``torch.no_grad``.

    ``prefix_len`` > 1 (see :func:`shared_prefix_len`): the first ``prefix_len`` tokens are the
    same in every row and right-padded rows start at position 0; they are run once, their KV
    cache repeated to every row (gradients from all rows flow back into that one computation),
    and only the rest runs per row. Positions ``1 .. prefix_len - 1`` then get logprob 0 (they
    must not be trained on). The result equals the full computation.
    """
    B, T = input_ids_BT.shape
    P = prefix_len if 1 < prefix_len < T else 0
    with autocast_context(bf16, input_ids_BT.device):
        if P:
            pre = model(
                input_ids=input_ids_BT[:1, :P], attention_mask=attention_mask_BT[:1, :P], use_cache=True
            )
            cache = output_cache(pre)
            cache.batch_repeat_interleave(B)
            positions_BS = torch.arange(P, T, device=input_ids_BT.device).expand(B, T - P)
            rest = model(
                input_ids=input_ids_BT[:, P:],
                attention_mask=attention_mask_BT,
                position_ids=positions_BS,
                use_cache=True,
                **{cache_kwarg(model): cache},
            ).logits  # B x (T-P) x V: predicts tokens P+1..T
            first_BV = pre.logits[:, -1:].expand(B, 1, pre.logits.shape[-1])  # predicts token P
            logits_BTV = torch.cat([first_BV, rest[:, :-1]], dim=1)  # B x (T-P) x V: tokens P..T-1
        else:
            logits_BTV = model(input_ids=input_ids_BT, attention_mask=attention_mask_BT).logits[:, :-1]
    start = P if P else 1  # the first position whose logprob is computed
    picked_BT = token_logprobs_from_logits(logits_BTV, input_ids_BT[:, start:])  # B x (T-start), float32
    logprobs_BT = F.pad(picked_BT, (start, 0))  # B x T
    entropy_BT = None
    if with_entropy:  # with gradient only when asked (an entropy bonus); else just for logging
        source_BTV = logits_BTV if entropy_grad else logits_BTV.detach()
        entropy_BT = F.pad(entropy_from_logits(source_BTV), (start, 0))  # B x T
    return logprobs_BT, entropy_BT
