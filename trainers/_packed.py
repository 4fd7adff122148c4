"""Packed suffixes over one shared prefix: the trainer's forward without padding.

The rows of a GRPO group share their prompt. :func:`trainers.logprobs.forward_logprobs` runs
that prefix once; before this module it then ran the ``B`` suffixes as a right-padded batch over
the prefix's KV cache repeated ``B`` times. Multi-turn responses differ a lot in length (one
turn, or three turns with database results), so most of that batch was padding: in a
CPU-sized SkyRL-SQL step, 9,834 positions ran through the model for 4,579 real ones.

Here the suffixes are packed end to end into one row (their own positions, ``P .. P + s - 1``
each) over the prefix's cache, unrepeated. Every linear layer then sees only real tokens.
Segment ``i``'s queries attend to the prefix's keys and to its own earlier keys, never to
another segment's: consecutive segments are grouped into blocks (:data:`BLOCK_TOKENS`), each
one attention call with a block-diagonal mask. :func:`use_packed_attention` registers
:func:`_packed_attention` with transformers' ``AttentionInterface`` and switches the model to
it; it attends with transformers' own SDPA function (the same kernel and numerics as the
padded path) and hands any call without segments to that function unchanged, so every other
user of the module (generation, an engine decoding from it) still gets plain SDPA.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import torch

from skyrl_agent.models import register_attention

__all__ = ["PACKED", "SEGMENTS", "Segments", "use_packed_attention"]

#: The name the attention function is registered under (``config._attn_implementation``).
PACKED = "skyrl_packed"
#: The keyword that carries a :class:`Segments` to the attention function.
SEGMENTS = "skyrl_segments"

_lock = threading.Lock()


#: Consecutive segments run as one attention call while their tokens stay within this many
#: (a block-diagonal mask keeps each to the prefix and itself). On 2 cores, 8 segments of 120
#: tokens over a 560-token prefix: 57 ms a layer for forward and backward as 8 calls, 38 ms as
#: one (the per-call slicing of keys costs more than the masked-out scores); the masked-out part
#: grows with the block, so long suffixes still get a call each.
BLOCK_TOKENS = 1024


@dataclass(frozen=True)
class Segments:
    """Where the packed suffixes lie, for every layer's attention (built once per forward).

    Suffixes are grouped into blocks of consecutive ones (see :data:`BLOCK_TOKENS`); each block
    is one attention call."""

    prefix: int
    """Tokens of the shared prefix in the KV cache ahead of the packed row."""
    bounds: tuple[tuple[int, int], ...]
    """``(start, end)`` of each block of suffixes in the packed row."""
    masks: tuple[torch.Tensor, ...]
    """Each block's ``1 x 1 x L x (prefix + L)`` bool mask, True where attending: the whole
    prefix, then causal within each suffix of the block and nothing across suffixes."""

    @classmethod
    def of(
        cls, prefix: int, lengths: list[int], device: torch.device, block_tokens: int | None = None
    ) -> Segments:
        """The blocks of suffixes of ``lengths`` tokens (empty ones left out), packed in order,
        each at most ``block_tokens`` (default :data:`BLOCK_TOKENS`) unless one suffix alone is
        longer; ``block_tokens=0`` gives each suffix its own block."""
        if block_tokens is None:
            block_tokens = BLOCK_TOKENS
        groups: list[list[int]] = []
        for n in lengths:
            if n <= 0:
                continue
            if groups and sum(groups[-1]) + n <= block_tokens:
                groups[-1].append(n)
            else:
                groups.append([n])
        bounds, masks, start = [], [], 0
        for group in groups:
            L = sum(group)
            mask_LL = torch.zeros(L, L, dtype=torch.bool, device=device)
            at = 0
            for n in group:
                mask_LL[at : at + n, at : at + n] = torch.ones(n, n, dtype=torch.bool, device=device).tril()
                at += n
            prefix_LP = torch.ones(L, prefix, dtype=torch.bool, device=device)
            masks.append(torch.cat([prefix_LP, mask_LL], dim=1)[None, None])
            bounds.append((start, start + L))
            start += L
        return cls(prefix, tuple(bounds), tuple(masks))


def _packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention contract (``query [1, H, S, D]``, ``key``/``value``
    ``[1, KV, P + S, D]``; returns ``([1, S, H, D], None)``). With :data:`SEGMENTS` in
    ``kwargs``: one SDPA call per block of segments over the prefix's keys and the block's own;
    without: transformers' SDPA function as it is."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    segments: Segments | None = kwargs.pop(SEGMENTS, None)
    if segments is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    P = segments.prefix
    outs = []
    for (start, end), mask in zip(segments.bounds, segments.masks, strict=True):
        if start == 0 and P + end == key.shape[2]:  # one block over the whole row: no copies
            k_1KLD, v_1KLD = key, value
        else:
            k_1KLD = torch.cat([key[:, :, :P], key[:, :, P + start : P + end]], dim=2)
            v_1KLD = torch.cat([value[:, :, :P], value[:, :, P + start : P + end]], dim=2)
        out_1SHD, _ = sdpa_attention_forward(
            module, query[:, :, start:end], k_1KLD, v_1KLD, mask, dropout, scaling, **kwargs
        )
        outs.append(out_1SHD)
    return torch.cat(outs, dim=1), None


def use_packed_attention(module: torch.nn.Module) -> bool:
    """Switch ``module`` from transformers' SDPA attention to :data:`PACKED` (which is SDPA for
    every call without :data:`SEGMENTS`); returns whether ``module`` now runs it. Other
    implementations (eager, flash, flex, the engine's decode attention) are left alone.

    The switch is for good, not for one call: a backward that recomputes a forward (activation
    checkpointing) must see the same attention as the forward did."""
    config = getattr(module, "config", None)
    impl = getattr(config, "_attn_implementation", None)
    if impl == PACKED:
        return True
    if impl != "sdpa":
        return False
    register_attention(PACKED, _packed_attention)
    with _lock:
        config._attn_implementation = PACKED
    return True
