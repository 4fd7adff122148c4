"""Attention for CPU decode steps: two float32 matmuls instead of torch's fused kernel.

For a decode step (one query token per row) on CPU this was once about 10x faster than
``torch.nn.functional.scaled_dot_product_attention`` on this project's 2-core machine (a batch
of 32, 170 cached tokens: 3.7 ms against 0.35 ms per layer with bf16 matmuls). It no longer
pays off (2026-12-04, a batch of 30, 9 query heads over 3 key/value heads, 561 cached bf16
tokens, timed alone): transformers' ``sdpa_attention_forward``, which the model calls, took
1.8 ms per layer, these float32 matmuls 2.2 ms (torch's SDPA called directly with
``enable_gqa=True`` took 10.4 ms), and the main job's held-out evaluation of a trained
checkpoint took 126 s with the engine's bf16 weight copy switched to it against 104 s without.
So :class:`~skyrl_agent.policies.hf.HFPolicy` leaves it off unless
``fast_decode_attention=True``.

The matmuls run in float32 with autocast off: the bf16 keys and values are cast up, so the
scores and the weighted sum are float32 as in SDPA's kernel (scores' error against float64:
4e-7; a bf16 matmul, as in the first version, rounds them to bf16: 0.016).

:data:`ATTENTION` is registered with transformers' ``AttentionInterface`` (and its mask
interface, with SDPA's masks), so a model switched to it (:func:`use_fast_decode_attention`)
keeps transformers' own modules, caches and masks. Steps with one query token on CPU take the
matmul path; everything else (prefill, the trainer's forward and backward, CUDA) is handed to
transformers' SDPA function unchanged, so training numerics do not move.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from skyrl_agent.models import plain_attention_call, switch_attention

__all__ = ["ATTENTION", "use_fast_decode_attention"]

#: The name the attention function is registered under (``model.config._attn_implementation``).
ATTENTION = "skyrl_cpu_decode"


def _decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``query [B, H, Q, D]``, ``key``/``value``
    ``[B, KV, L, D]``, a bool (``True`` = attend) or additive mask ``[B, 1, Q, L]``; returns
    ``([B, Q, H, D], None)``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    B, H, Q, D = query.shape
    KV, L = key.shape[1], key.shape[2]
    if not (
        Q == 1
        and query.device.type == "cpu"
        and plain_attention_call(query, key, attention_mask, dropout, kwargs)
    ):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    group = H // KV
    scale = scaling if scaling is not None else 1.0 / math.sqrt(D)
    with torch.autocast("cpu", enabled=False):  # float32 scores and sums, as SDPA's kernel
        # query head h reads key/value head h // group (transformers' repeat_kv order)
        q_BKGD = query.reshape(B, KV, group, D).float()
        scores_BKGL = torch.matmul(q_BKGD, key.float().transpose(-1, -2)) * scale
        if attention_mask is not None:
            mask_B11L = attention_mask[:, :, :, :L]
            if mask_B11L.dtype == torch.bool:
                scores_BKGL = scores_BKGL.masked_fill(~mask_B11L, float("-inf"))
            else:
                scores_BKGL = scores_BKGL + mask_B11L.float()
        probs_BKGL = torch.softmax(scores_BKGL, dim=-1)
        out_BKGD = torch.matmul(probs_BKGL, value.float()).to(query.dtype)
    return out_BKGD.reshape(B, H, 1, D).transpose(1, 2), None


def use_fast_decode_attention(model: Any) -> bool:
    """Switch ``model`` from SDPA to :data:`ATTENTION` when it runs on CPU; returns whether it did.

    Models on other devices, or with another attention implementation (eager, flash, flex),
    are left alone."""
    if getattr(getattr(model, "config", None), "_attn_implementation", None) == ATTENTION:
        return True
    try:
        device = next(model.parameters()).device
    except (StopIteration, AttributeError):
        return False
    return device.type == "cpu" and switch_attention(model, ATTENTION, _decode_attention)
