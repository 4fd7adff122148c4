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

On CPU (:data:`SPLIT_PREFIX`) each layer attends differently: the whole packed row's queries
against the prefix's keys in one unmasked call, and each suffix against its own columns
(causal; suffixes of similar length padded into one batch), the two softmaxes merged by their
log-sum-exps (:class:`_PrefixThenOwn`). The blocks' masked calls computed every suffix against
every other suffix of its block and threw most of it away; this computes about half as many
scores, with the kernel's unmasked and causal paths (one layer of a main-job step: 1.29x).
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any

import torch

from skyrl_agent.models import plain_attention_call, register_attention, sdpa_inputs

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

#: On CPU, attend to the prefix and to each suffix's own columns in separate calls merged by
#: log-sum-exp (:class:`_PrefixThenOwn`) instead of the masked blocks. One layer of a main-job
#: train step (3,868 tokens in 32 suffixes over a 626-token prefix, bf16, 2 cores): 348 ms
#: forward and backward as blocks, 270 ms split (``python bench/bench_train_step.py --attention``).
SPLIT_PREFIX = True

#: Suffixes padded into one batch for their own-columns attention while each is at least this
#: fraction of the batch's longest (sorted by length, longest first): padding is wasted work, and
#: each batch is one more kernel call per layer.
OWN_BATCH_FILL = 0.75


@dataclass(frozen=True)
class OwnBatch:
    """Suffixes of similar length as one padded batch ``N x M`` for their own-columns attention."""

    index_NM: torch.Tensor
    """Position in the packed row of each suffix's token ``m``; a padding slot repeats its
    suffix's last position (so its log-sum-exp is finite; its gradient is zeroed)."""
    keep_K: torch.Tensor
    """Which of the ``N * M`` flattened slots are real tokens."""
    pos_K: torch.Tensor
    """Their positions in the packed row (``index_NM.flatten()[keep_K]``)."""

    @classmethod
    def of(cls, starts: list[int], lengths: list[int], device: torch.device) -> OwnBatch:
        M = max(lengths)
        at_M = torch.arange(M, device=device)
        len_N1 = torch.tensor(lengths, device=device)[:, None]
        index_NM = torch.tensor(starts, device=device)[:, None] + torch.minimum(at_M[None], len_N1 - 1)
        keep_K = (at_M[None] < len_N1).flatten().nonzero().squeeze(1)
        return cls(index_NM, keep_K, index_NM.flatten()[keep_K])

    def gather(self, x_XL: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """This batch's tokens of ``x`` (``X x L x ...``, packed order, ``offset`` positions
        ahead of the packed row: the prefix, for keys and values) as ``N x X x M x ...``."""
        N, M = self.index_NM.shape
        at = self.index_NM.flatten() + offset
        return x_XL[:, at].view(x_XL.shape[0], N, M, *x_XL.shape[2:]).transpose(0, 1).contiguous()

    def packed(self, y_NXM: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`gather` for the real tokens: ``N x X x M x ...`` to ``X x K x ...``,
        the ``K`` real tokens in the order of :attr:`pos_K` (padding slots left out)."""
        X = y_NXM.shape[1]
        return y_NXM.transpose(0, 1).reshape(X, -1, *y_NXM.shape[3:])[:, self.keep_K]


@dataclass(frozen=True)
class Segments:
    """Where the packed suffixes lie, for every layer's attention (built once per forward).

    Suffixes are grouped into blocks of consecutive ones (see :data:`BLOCK_TOKENS`); each block
    is one attention call."""

    prefix: int
    """Tokens of the shared prefix in the KV cache ahead of the packed row."""
    bounds: tuple[tuple[int, int], ...]
    """``(start, end)`` of each block of suffixes in the packed row."""
    blocks: tuple[tuple[int, ...], ...]
    """The lengths of each block's suffixes, in packed order."""
    device: torch.device
    """Where the masks are built."""
    own: tuple[OwnBatch, ...] = ()
    """The suffixes in padded batches of similar length, for :class:`_PrefixThenOwn`."""

    @classmethod
    def of(
        cls, prefix: int, lengths: list[int], device: torch.device, block_tokens: int | None = None
    ) -> Segments:
        """The blocks of suffixes of ``lengths`` tokens (empty ones left out), packed in order,
        each at most ``block_tokens`` (default :data:`BLOCK_TOKENS`) unless one suffix alone is
        longer; ``block_tokens=0`` gives each suffix its own block."""
        if block_tokens is None:
            block_tokens = BLOCK_TOKENS
        real = [n for n in lengths if n > 0]
        groups: list[list[int]] = []
        for n in real:
            if groups and sum(groups[-1]) + n <= block_tokens:
                groups[-1].append(n)
            else:
                groups.append([n])
        bounds, start = [], 0
        for group in groups:
            bounds.append((start, start + sum(group)))
            start += sum(group)
        starts = [0]
        for n in real:
            starts.append(starts[-1] + n)
        spans = sorted(zip(starts[:-1], real, strict=True), key=lambda sn: -sn[1])
        own: list[OwnBatch] = []
        while spans:
            take = [sn for sn in spans if sn[1] >= OWN_BATCH_FILL * spans[0][1]]
            spans = spans[len(take) :]
            own.append(OwnBatch.of([a for a, _ in take], [n for _, n in take], device))
        return cls(prefix, tuple(bounds), tuple(tuple(g) for g in groups), device, tuple(own))

    @functools.cached_property
    def masks(self) -> tuple[torch.Tensor, ...]:
        """Each block's ``1 x 1 x L x (prefix + L)`` bool mask, True where attending: the whole
        prefix, then causal within each suffix of the block and nothing across suffixes. Built
        on first use: the split path (:class:`_PrefixThenOwn`) never reads them."""
        masks = []
        for group in self.blocks:
            L = sum(group)
            mask_LL = torch.zeros(L, L, dtype=torch.bool, device=self.device)
            at = 0
            for n in group:
                mask_LL[at : at + n, at : at + n] = torch.ones(
                    n, n, dtype=torch.bool, device=self.device
                ).tril()
                at += n
            prefix_LP = torch.ones(L, self.prefix, dtype=torch.bool, device=self.device)
            masks.append(torch.cat([prefix_LP, mask_LL], dim=1)[None, None])
        return tuple(masks)


class _PrefixThenOwn(torch.autograd.Function):
    """The packed row's attention on CPU as flash-attention calls: all ``S`` queries against the
    prefix's ``P`` keys (one call, no mask; the ``G`` query heads of a key/value head as ``G * S``
    queries, so the keys are not repeated), and each :class:`OwnBatch` causal over its own
    columns; the parts merged by their log-sum-exps into the softmax over all the columns.

    The backward calls the kernel's backward for each part with the *merged* output and
    log-sum-exp: it recomputes a part's probabilities as ``exp(score - lse)``, which with the full
    softmax's ``lse`` are that part's share of the full attention, and its ``rowsum(dO * O)`` with
    the full output, so the parts' gradients add up to the exact gradient over all the columns."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q_1HSD: torch.Tensor,
        k_1KLD: torch.Tensor,
        v_1KLD: torch.Tensor,
        segments: Segments,
        scale: float,
    ) -> torch.Tensor:
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        P = segments.prefix
        _, H, S, D = q_1HSD.shape
        KV = k_1KLD.shape[1]
        q_HSD, k_KLD, v_KLD = q_1HSD[0], k_1KLD[0], v_1KLD[0]
        out_HSD = q_HSD.new_empty((H, S, D))
        lse_HS = torch.empty((H, S), dtype=torch.float32, device=q_HSD.device)
        for b in segments.own:
            o_NHMD, lse_NHM = flash(
                b.gather(q_HSD), b.gather(k_KLD, P), b.gather(v_KLD, P), 0.0, True, scale=scale
            )
            out_HSD[:, b.pos_K] = b.packed(o_NHMD)
            lse_HS[:, b.pos_K] = b.packed(lse_NHM).float()
        if P:
            q_1KnD = q_HSD.reshape(1, KV, H // KV * S, D)  # n = G * S queries per key/value head
            pre_1KnD, pre_lse_1Kn = flash(q_1KnD, k_1KLD[:, :, :P], v_1KLD[:, :, :P], 0.0, False, scale=scale)
            pre_lse_HS = pre_lse_1Kn.reshape(H, S).float()
            top_HS = torch.maximum(lse_HS, pre_lse_HS)
            w_own_HS, w_pre_HS = torch.exp(lse_HS - top_HS), torch.exp(pre_lse_HS - top_HS)
            sum_HS = w_own_HS + w_pre_HS
            merged_HSD = (
                out_HSD.float() * w_own_HS[..., None]
                + pre_1KnD.reshape(H, S, D).float() * w_pre_HS[..., None]
            )
            out_HSD = (merged_HSD / sum_HS[..., None]).to(q_HSD.dtype)
            lse_HS = top_HS + torch.log(sum_HS)
        ctx.save_for_backward(q_HSD, k_KLD, v_KLD, out_HSD, lse_HS)
        ctx.segments, ctx.scale = segments, scale
        return out_HSD.transpose(0, 1).contiguous()[None]  # 1 x S x H x D

    @staticmethod
    def backward(ctx: Any, g_1SHD: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
        q_HSD, k_KLD, v_KLD, out_HSD, lse_HS = ctx.saved_tensors
        segments, scale = ctx.segments, ctx.scale
        P = segments.prefix
        H, S, D = q_HSD.shape
        KV = k_KLD.shape[0]
        g_HSD = g_1SHD[0].transpose(0, 1).to(q_HSD.dtype)
        dk_KLD, dv_KLD = torch.zeros_like(k_KLD), torch.zeros_like(v_KLD)
        if P:
            n = H // KV * S
            dq_1KnD, dk_1KPD, dv_1KPD = backward(
                g_HSD.reshape(1, KV, n, D),
                q_HSD.reshape(1, KV, n, D),
                k_KLD[None, :, :P],
                v_KLD[None, :, :P],
                out_HSD.reshape(1, KV, n, D),
                lse_HS.reshape(1, KV, n),
                0.0,
                False,
                scale=scale,
            )
            dq_HSD = dq_1KnD.reshape(H, S, D).clone()
            dk_KLD[:, :P], dv_KLD[:, :P] = dk_1KPD[0], dv_1KPD[0]
        else:
            dq_HSD = torch.zeros_like(q_HSD)
        for b in segments.own:
            N, M = b.index_NM.shape
            real_N1M1 = torch.zeros(N * M, dtype=g_HSD.dtype, device=g_HSD.device)
            real_N1M1[b.keep_K] = 1
            real_N1M1 = real_N1M1.view(N, 1, M, 1)
            dq_NHMD, dk_NKMD, dv_NKMD = backward(
                b.gather(g_HSD) * real_N1M1,  # no gradient from the padding slots
                b.gather(q_HSD),
                b.gather(k_KLD, P),
                b.gather(v_KLD, P),
                b.gather(out_HSD),
                b.gather(lse_HS),
                0.0,
                True,
                scale=scale,
            )
            dq_HSD[:, b.pos_K] += b.packed(dq_NHMD)
            dk_KLD[:, P + b.pos_K] += b.packed(dk_NKMD)
            dv_KLD[:, P + b.pos_K] += b.packed(dv_NKMD)
        return dq_HSD[None], dk_KLD[None], dv_KLD[None], None, None


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
    if (
        SPLIT_PREFIX
        and query.device.type == "cpu"
        and segments.own
        and plain_attention_call(query, key, attention_mask, dropout, kwargs)
    ):
        query, key, value = sdpa_inputs(query, key, value)
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        with torch.autocast("cpu", enabled=False):
            return _PrefixThenOwn.apply(query, key, value, segments, scale), None
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
