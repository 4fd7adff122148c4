"""Attention for CPU decode steps: two matmuls where torch's fused kernel is slow.

On CPU, ``torch.nn.functional.scaled_dot_product_attention`` runs a flash-attention kernel
that is tuned for long queries. For a decode step (one query token per row) in bf16 it is
about 10x slower than the plain ``softmax(q k^T) v`` on this project's 2-core machine (a
batch of 32, 9 query heads over 3 key/value heads, 170 cached tokens: 3.7 ms against 0.35 ms per
layer, timed alone), and at 30 layers that was 43% of a decode step by the profiler.
``bench/bench_attention.py`` times whole steps with and without it.

Its scores come out of a bf16 matmul, so they are rounded to bf16 before the softmax, where
SDPA's kernel keeps them in float32; that is why :class:`~skyrl_agent.policies.hf.HFPolicy`
leaves it off unless ``fast_decode_attention=True`` (decision 0018).

:data:`ATTENTION` is registered with transformers' ``AttentionInterface`` (and its mask
interface, with SDPA's masks), so a model switched to it (:func:`use_fast_decode_attention`)
keeps transformers' own modules, caches and masks. Steps with one query token on CPU take the
matmul path; everything else (prefill, the trainer's forward and backward, CUDA) is handed to
transformers' SDPA function unchanged, so training numerics do not move.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

__all__ = ["ATTENTION", "use_fast_decode_attention"]

log = logging.getLogger(__name__)

#: The name the attention function is registered under (``model.config._attn_implementation``).
ATTENTION = "skyrl_cpu_decode"

_registered = False


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
    plain = (
        Q == 1
        and query.device.type == "cpu"
        and dropout == 0.0
        and H % KV == 0
        and kwargs.get("softcap") is None
        and kwargs.get("position_bias") is None
        and kwargs.get("s_aux") is None
        and (attention_mask is None or (attention_mask.dim() == 4 and attention_mask.shape[1] == 1))
    )
    if not plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    group = H // KV
    scale = scaling if scaling is not None else 1.0 / math.sqrt(D)
    # query head h reads key/value head h // group (transformers' repeat_kv order)
    q_BKGD = query.reshape(B, KV, group, D)
    scores_BKGL = torch.matmul(q_BKGD, key.transpose(-1, -2)).float() * scale
    if attention_mask is not None:
        mask_B11L = attention_mask[:, :, :, :L]
        if mask_B11L.dtype == torch.bool:
            scores_BKGL = scores_BKGL.masked_fill(~mask_B11L, float("-inf"))
        else:
            scores_BKGL = scores_BKGL + mask_B11L.float()
    probs_BKGL = torch.softmax(scores_BKGL, dim=-1).to(value.dtype)
    out_BKGD = torch.matmul(probs_BKGL, value)
    return out_BKGD.reshape(B, H, 1, D).transpose(1, 2), None


def _register() -> None:
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTENTION, _decode_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)
    _registered = True


def use_fast_decode_attention(model: Any) -> bool:
    """Switch ``model`` from SDPA to :data:`ATTENTION` when it runs on CPU; returns whether it did.

    Models on other devices, or with another attention implementation (eager, flash, flex),
    are left alone."""
    config = getattr(model, "config", None)
    impl = getattr(config, "_attn_implementation", None)
    if impl == ATTENTION:
        return True
    try:
        device = next(model.parameters()).device
    except (StopIteration, AttributeError):
        return False
    if impl != "sdpa" or device.type != "cpu" or not hasattr(model, "set_attn_implementation"):
        return False
    _register()
    try:
        model.set_attn_implementation(ATTENTION)
    except (ValueError, KeyError, ImportError) as exc:  # a model class that rejects custom attention
        log.info("kept SDPA attention for %s: %s", type(model).__name__, exc)
        return False
    return getattr(model.config, "_attn_implementation", None) == ATTENTION
