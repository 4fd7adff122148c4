"""Per-token log-probabilities (and entropies, and critic values) of given sequences under a causal LM.

The default path runs the decoder once, then the LM head and log-softmax only at the positions
that predict a trained token (``mask_BT``), in row chunks, through a fused autograd function
that never keeps ``N x V`` logits: its backward recomputes each chunk's logits and uses
``d logprob / d logits = onehot(target) - softmax``. With 49k-token vocabularies the head is
most of a small model's compute, and prompt and observation positions are most of a multi-turn
sequence, so this skips most of it. The full-logits path (``fused_head=False``) is kept as the
reference; a test checks that both give the same logprobs, entropies and gradients.

Also here, for callers that already hold ``B x T x V`` logits (the full-logits path, the Tinker
server's forward passes): :func:`token_logprobs_from_logits` and :func:`entropy_from_logits`,
chunked and checkpointed so their float32 intermediates never span the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from skyrl_agent.models import bf16_autocast, cache_kwarg, output_cache
from skyrl_gym.errors import ConfigError
from trainers._masked import check_shape
from trainers._packed import SEGMENTS, Segments, use_packed_attention

__all__ = [
    "ForwardOutput",
    "forward_logprobs",
    "token_logprobs",
    "token_logprobs_from_logits",
    "entropy_from_logits",
    "shared_prefix_len",
]

_CHUNK = 512  # rows of the LM head computed at once (512 x 49k float32 logits: about 100 MB)
#: The fused head keeps its logits (in the matmul's dtype) for the backward while they take at
#: most this many bytes, instead of recomputing them there: a main-job step's 2,740 trained
#: tokens x 49,152 in bf16 are 270 MB, and the recompute was a third of the head's backward.
KEEP_LOGITS_BYTES = 512 << 20


def shared_prefix_len(input_ids_BT: torch.Tensor, mask_BT: torch.Tensor) -> int:
    """How many leading tokens every row shares and none trains on (a common system prompt).

    ``token_logprobs(prefix_len=...)`` computes them once instead of once per row."""
    same_T = (input_ids_BT == input_ids_BT[:1]).all(dim=0)  # T: column identical in every row
    lcp = int(same_T.long().cumprod(0).sum())
    trained_T = mask_BT.bool().any(dim=0)  # T
    first_trained = int(trained_T.long().argmax()) if bool(trained_T.any()) else input_ids_BT.shape[1]
    return min(lcp, first_trained)


@dataclass
class ForwardOutput:
    """What :func:`forward_logprobs` returns; every tensor is ``B x T``, aligned with the input ids."""

    logprobs_BT: torch.Tensor
    """``log p(input_ids[b, t] | input_ids[b, :t])`` in float32; 0 where not computed."""
    entropy_BT: torch.Tensor | None
    """Entropy of the distribution that predicted token ``t`` (when asked for)."""
    values_BT: torch.Tensor | None
    """The critic's value of the state in which token ``t`` was generated (read from the hidden
    state at ``t - 1``, like the logits), when a value head is given."""


class _LinearTokenLogprob(torch.autograd.Function):
    """``log_softmax(h @ W.T)[target]`` (and optionally the entropy, without gradient) for N rows,
    without keeping N x V logits: forward and backward go in row chunks; the backward recomputes
    each chunk's logits."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        h_NH: torch.Tensor,
        w_VH: torch.Tensor,
        ids_N: torch.Tensor,
        bf16: bool,
        chunk: int,
        with_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dt = torch.bfloat16 if bf16 else torch.float32
        w_VH_dt = w_VH.to(dt)
        N, V = h_NH.shape[0], w_VH.shape[0]
        lp_N = torch.empty(N, dtype=torch.float32, device=h_NH.device)
        lse_N = torch.empty(N, dtype=torch.float32, device=h_NH.device)
        ent_N = torch.zeros(N if with_entropy else 0, dtype=torch.float32, device=h_NH.device)
        keep = any(ctx.needs_input_grad[:2]) and N * V * w_VH_dt.element_size() <= KEEP_LOGITS_BYTES
        kept_NV = torch.empty((N, V) if keep else (0, V), dtype=dt, device=h_NH.device)
        for s in range(0, N, chunk):
            e = min(s + chunk, N)
            if keep:
                torch.matmul(h_NH[s:e].to(dt), w_VH_dt.T, out=kept_NV[s:e])
                logits_CV = kept_NV[s:e].float()  # C x V
            else:
                logits_CV = (h_NH[s:e].to(dt) @ w_VH_dt.T).float()  # C x V
            lse_C = torch.logsumexp(logits_CV, dim=-1)  # C
            lse_N[s:e] = lse_C
            lp_N[s:e] = logits_CV.gather(-1, ids_N[s:e, None]).squeeze(-1) - lse_C
            if with_entropy:  # H = lse - sum_v p_v x_v
                p_CV = torch.exp(logits_CV - lse_C[:, None])  # C x V
                ent_N[s:e] = lse_C - (p_CV * logits_CV).sum(-1)
        ctx.save_for_backward(h_NH, w_VH, ids_N, lse_N, kept_NV)
        ctx.bf16, ctx.chunk, ctx.keep = bf16, chunk, keep
        ctx.mark_non_differentiable(ent_N)
        return lp_N, ent_N

    @staticmethod
    def backward(ctx: Any, g_N: torch.Tensor, _g_ent: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        h_NH, w_VH, ids_N, lse_N, kept_NV = ctx.saved_tensors
        dt = torch.bfloat16 if ctx.bf16 else torch.float32
        w_VH_dt = w_VH.to(dt)
        gh_NH = torch.empty_like(h_NH)
        gw_VH = torch.zeros(w_VH.shape, dtype=torch.float32, device=w_VH.device)
        for s in range(0, h_NH.shape[0], ctx.chunk):
            e = min(s + ctx.chunk, h_NH.shape[0])
            h_CH = h_NH[s:e].to(dt)
            g_C1 = g_N[s:e, None].float()
            logits_CV = kept_NV[s:e] if ctx.keep else h_CH @ w_VH_dt.T  # the forward's, or again
            p_CV = torch.exp(logits_CV.float() - lse_N[s:e, None])  # C x V, softmax
            grad_CV = p_CV.mul_(-g_C1)  # -g * softmax
            grad_CV.scatter_add_(-1, ids_N[s:e, None], g_C1)  # + g * onehot(target)
            grad_CV = grad_CV.to(dt)
            gh_NH[s:e] = (grad_CV @ w_VH_dt).to(h_NH.dtype)  # C x H
            gw_VH += (grad_CV.T @ h_CH).float()  # V x H
        return gh_NH, gw_VH.to(w_VH.dtype), None, None, None, None


def _head_rows(
    head: torch.nn.Module, h_NH: torch.Tensor, ids_N: torch.Tensor, with_entropy: bool, bf16: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs (and entropies, with gradient) through any head module, chunk by checkpointed chunk."""

    def rows(h_CH: torch.Tensor, ids_C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with bf16_autocast(bf16, h_CH.device):
            x_CV = head(h_CH)
        x_CV = x_CV.float()  # C x V
        lse_C = torch.logsumexp(x_CV, dim=-1)  # C
        lp_C = x_CV.gather(-1, ids_C[:, None]).squeeze(-1) - lse_C  # C
        ent_C = lse_C - (torch.softmax(x_CV, -1) * x_CV).sum(-1) if with_entropy else lse_C.new_zeros(0)
        return lp_C, ent_C

    lps, ents = [], []
    for s in range(0, h_NH.shape[0], _CHUNK):
        h_CH, ids_C = h_NH[s : s + _CHUNK], ids_N[s : s + _CHUNK]
        if torch.is_grad_enabled() and h_CH.requires_grad:
            lp_C, ent_C = checkpoint(rows, h_CH, ids_C, use_reentrant=False)
        else:
            lp_C, ent_C = rows(h_CH, ids_C)
        lps.append(lp_C)
        ents.append(ent_C)
    lp_N = torch.cat(lps) if lps else h_NH.new_zeros(0, dtype=torch.float32)
    ent_N = (torch.cat(ents) if ents else h_NH.new_zeros(0, dtype=torch.float32)) if with_entropy else None
    return lp_N, ent_N


def _rowwise_chunked(
    fn: Callable[[torch.Tensor], torch.Tensor], x_NV: torch.Tensor, chunk_size: int
) -> torch.Tensor:
    """``fn`` over row chunks of ``x_NV``; under autograd each chunk is checkpointed, so only the
    input is kept and the float32 intermediates (``chunk_size x V``) are recomputed in backward."""
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be >= 1, got {chunk_size}")
    outs = []
    for chunk_CV in x_NV.split(chunk_size, dim=0):
        if torch.is_grad_enabled() and chunk_CV.requires_grad:
            outs.append(checkpoint(fn, chunk_CV, use_reentrant=False))
        else:
            outs.append(fn(chunk_CV))
    return torch.cat(outs) if outs else x_NV.new_zeros((0,), dtype=torch.float32)


def _entropy_rows(logits_CV: torch.Tensor) -> torch.Tensor:
    x_CV = logits_CV.float()  # C x V, float32 even for bf16 logits
    lse_C = torch.logsumexp(x_CV, dim=-1)  # C
    p_CV = torch.softmax(x_CV, dim=-1)  # C x V
    return lse_C - (p_CV * x_CV).sum(dim=-1)  # C: H = logsumexp(x) - sum p x


def entropy_from_logits(logits_BTV: torch.Tensor, chunk_size: int = 1024) -> torch.Tensor:
    """Per-token entropy ``H = -sum_v p_v log p_v`` (nats) of ``softmax(logits)``, shape ``B x T``.

    Computed as ``logsumexp(x) - sum_v softmax(x)_v x_v`` in float32, ``chunk_size`` rows of
    ``B*T`` at a time; with gradient each chunk is recomputed in backward, so peak extra memory is
    a few ``chunk_size x V`` float32 buffers, not ``B x T x V`` ones.
    """
    B, T, V = logits_BTV.shape
    return _rowwise_chunked(_entropy_rows, logits_BTV.reshape(B * T, V), chunk_size).view(B, T)


def token_logprobs_from_logits(
    logits_BTV: torch.Tensor, token_ids_BT: torch.Tensor, chunk_size: int = 1024
) -> torch.Tensor:
    """``log softmax(logits)[token]`` for each position, shape ``B x T``, in float32.

    ``logits_BTV[:, t]`` must be the logits that predicted ``token_ids_BT[:, t]`` (shift the
    model's output by one first). Chunked like :func:`entropy_from_logits`."""
    B, T, V = logits_BTV.shape
    check_shape("token_ids_BT", token_ids_BT, (B, T))
    ids_N = token_ids_BT.reshape(B * T, 1).long()  # N x 1
    logits_NV = logits_BTV.reshape(B * T, V)  # N x V
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be >= 1, got {chunk_size}")
    outs = []
    for start in range(0, B * T, chunk_size):
        chunk_CV = logits_NV[start : start + chunk_size]
        ids_C1 = ids_N[start : start + chunk_size]

        def rows(x_CV: torch.Tensor, ids_C1: torch.Tensor = ids_C1) -> torch.Tensor:
            x_CV = x_CV.float()  # C x V
            return x_CV.gather(-1, ids_C1).squeeze(-1) - torch.logsumexp(x_CV, dim=-1)  # C

        if torch.is_grad_enabled() and chunk_CV.requires_grad:
            outs.append(checkpoint(rows, chunk_CV, use_reentrant=False))
        else:
            outs.append(rows(chunk_CV))
    return torch.cat(outs).view(B, T) if outs else logits_BTV.new_zeros((B, T), dtype=torch.float32)


def _can_fuse(model: torch.nn.Module) -> bool:
    """The fused path computes ``h @ W.T`` itself: only for a plain, bias-free linear head on a
    model without logit soft-capping or scaling (Llama, Qwen, SmolLM...)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    cfg = getattr(model, "config", None)
    return (
        hasattr(model, "get_decoder")
        and type(head) is torch.nn.Linear
        and head.bias is None
        and not getattr(cfg, "final_logit_softcapping", None)
        and getattr(cfg, "logit_scale", None) in (None, 1.0)
    )


def _prefix_shared_forward(
    module: torch.nn.Module,
    input_ids_BT: torch.Tensor,
    attention_mask_BT: torch.Tensor,
    P: int,
    field: str,
) -> torch.Tensor:
    """Run the shared prefix ``[:P]`` once, then the ``B`` suffixes on its KV cache; return
    ``module``'s output ``field`` (``"logits"`` or ``"last_hidden_state"``) at the positions
    predicting tokens ``P .. T-1``: ``B x (T-P) x D`` (zero where a row is padding).

    On an SDPA model the suffixes run packed into one row, without padding
    (:mod:`trainers._packed`); on other attention implementations, as a right-padded batch over
    the prefix's cache repeated ``B`` times."""
    B, T = input_ids_BT.shape
    pre = module(input_ids=input_ids_BT[:1, :P], attention_mask=attention_mask_BT[:1, :P], use_cache=True)
    cache = output_cache(pre)
    if use_packed_attention(module):
        rest_BSD = _packed_suffixes(module, input_ids_BT, attention_mask_BT, P, cache, field)
    else:
        cache.batch_repeat_interleave(B)
        positions_BS = torch.arange(P, T, device=input_ids_BT.device).expand(B, T - P)
        rest_BSD = getattr(
            module(
                input_ids=input_ids_BT[:, P:],
                attention_mask=attention_mask_BT,
                position_ids=positions_BS,
                use_cache=True,
                **{cache_kwarg(module): cache},
            ),
            field,
        )  # B x (T-P) x D: predicts tokens P+1..T
    pre_1PD = getattr(pre, field)
    first_B1D = pre_1PD[:, -1:].expand(B, 1, pre_1PD.shape[-1])  # predicts token P
    return torch.cat([first_B1D, rest_BSD[:, :-1]], dim=1)  # B x (T-P) x D: tokens P..T-1


def _packed_suffixes(
    module: torch.nn.Module,
    input_ids_BT: torch.Tensor,
    attention_mask_BT: torch.Tensor,
    P: int,
    cache: Any,
    field: str,
) -> torch.Tensor:
    """The suffixes ``[P:]`` of right-padded rows, packed end to end into one row over the
    prefix's ``cache`` (each at its own positions, attending to the prefix and to itself only);
    their output ``field`` scattered back to ``B x (T-P) x D``, zero on padding."""
    B, T = input_ids_BT.shape
    real_BS = attention_mask_BT[:, P:] != 0  # B x S, S = T - P
    segments = Segments.of(P, real_BS.sum(dim=1).tolist(), input_ids_BT.device)
    positions_BS = torch.arange(P, T, device=input_ids_BT.device).expand(B, T - P)
    out_1ND = getattr(
        module(
            input_ids=input_ids_BT[:, P:][real_BS][None],  # 1 x N, N real suffix tokens
            position_ids=positions_BS[real_BS][None],  # 1 x N, each segment from P
            use_cache=True,
            **{cache_kwarg(module): cache, SEGMENTS: segments},
        ),
        field,
    )
    out_BSD = out_1ND.new_zeros((B, T - P, out_1ND.shape[-1]))
    return out_BSD.masked_scatter(real_BS[..., None], out_1ND[0])  # B x S x D


def _decoder_hidden(
    model: torch.nn.Module, input_ids_BT: torch.Tensor, attention_mask_BT: torch.Tensor, P: int
) -> tuple[torch.Tensor, int]:
    """Final hidden states that predict tokens ``start .. T-1``: ``(h_BSH, start)`` with ``S = T - start``."""
    decoder = model.get_decoder()
    if not P:
        h_BTH = decoder(
            input_ids=input_ids_BT, attention_mask=attention_mask_BT, use_cache=False
        ).last_hidden_state
        return h_BTH[:, :-1], 1
    return _prefix_shared_forward(decoder, input_ids_BT, attention_mask_BT, P, "last_hidden_state"), P


def forward_logprobs(
    model: torch.nn.Module,
    input_ids_BT: torch.Tensor,
    attention_mask_BT: torch.Tensor,
    *,
    mask_BT: torch.Tensor | None = None,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    bf16: bool = False,
    prefix_len: int = 0,
    value_head: torch.nn.Module | None = None,
    fused_head: bool = True,
) -> ForwardOutput:
    """Logprobs (and entropies, critic values) of ``input_ids_BT`` under ``model``.

    ``mask_BT`` (1 on trained tokens): only those positions are computed, the rest are 0; ``None``
    computes every position from 1 on. ``with_entropy`` also returns each position's entropy
    (with a gradient only under ``entropy_grad``). ``value_head`` maps the final hidden state to a
    value (:class:`trainers.critic.ValueHead`). ``prefix_len`` > 1 (see :func:`shared_prefix_len`):
    the first ``prefix_len`` tokens are the same in every row and right-padded rows start at
    position 0; they run once and their KV cache is repeated to every row (positions
    ``1 .. prefix_len - 1`` then get 0 and must not be trained on). ``fused_head=False`` runs the
    reference path: full logits from ``model(...)`` at every position (no value head there).
    Gradients flow unless called under ``torch.no_grad``; logprobs are float32.
    """
    B, T = input_ids_BT.shape
    P = prefix_len if 1 < prefix_len < T else 0
    if not fused_head or not hasattr(model, "get_decoder") or (_full_logits_needed(model)):
        if value_head is not None:
            raise ConfigError("a value head needs the decoder's hidden states: use fused_head=True")
        lp_BT, ent_BT = _full_logits(
            model, input_ids_BT, attention_mask_BT, with_entropy, entropy_grad, bf16, P
        )
        if mask_BT is not None:  # same contract as the fused path: 0 off the mask
            on_BT = mask_BT != 0
            lp_BT = torch.where(on_BT, lp_BT, torch.zeros_like(lp_BT))
            ent_BT = None if ent_BT is None else torch.where(on_BT, ent_BT, torch.zeros_like(ent_BT))
        return ForwardOutput(lp_BT, ent_BT, None)
    with bf16_autocast(bf16, input_ids_BT.device):
        h_BSH, start = _decoder_hidden(model, input_ids_BT, attention_mask_BT, P)
    S = T - start
    ids_BS = input_ids_BT[:, start:]
    sel_BS = (
        mask_BT[:, start:] != 0
        if mask_BT is not None
        else torch.ones((B, S), dtype=torch.bool, device=input_ids_BT.device)
    )
    h_NH = h_BSH[sel_BS]  # N x H: only the positions that predict a computed token
    ids_N = ids_BS[sel_BS]  # N
    head = model.get_output_embeddings()
    if _can_fuse(model) and not (with_entropy and entropy_grad):
        lp_N, ent_N = _LinearTokenLogprob.apply(h_NH, head.weight, ids_N, bf16, _CHUNK, with_entropy)
    else:  # a head we cannot fuse (LoRA on the head, a bias) or an entropy bonus: checkpointed chunks
        lp_N, ent_N = _head_rows(head, h_NH, ids_N, with_entropy, bf16)
        if ent_N is not None and not entropy_grad:
            ent_N = ent_N.detach()

    def scatter(x_N: torch.Tensor) -> torch.Tensor:
        out_BS = torch.zeros((B, S), dtype=torch.float32, device=input_ids_BT.device)
        return F.pad(out_BS.masked_scatter(sel_BS, x_N.float()), (start, 0))  # B x T

    values_BT = None
    if value_head is not None:
        values_BT = scatter(value_head(h_NH.float()).squeeze(-1))  # B x T
    return ForwardOutput(
        logprobs_BT=scatter(lp_N),
        entropy_BT=scatter(ent_N) if with_entropy and ent_N is not None else None,
        values_BT=values_BT,
    )


def _full_logits_needed(model: torch.nn.Module) -> bool:
    cfg = getattr(model, "config", None)
    return bool(getattr(cfg, "final_logit_softcapping", None)) or getattr(cfg, "logit_scale", None) not in (
        None,
        1.0,
    )


def _full_logits(
    model: torch.nn.Module,
    input_ids_BT: torch.Tensor,
    attention_mask_BT: torch.Tensor,
    with_entropy: bool,
    entropy_grad: bool,
    bf16: bool,
    P: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The reference path: ``B x T x V`` logits from ``model(...)``, log-softmaxed in chunks."""
    with bf16_autocast(bf16, input_ids_BT.device):
        if P:
            logits_BTV = _prefix_shared_forward(model, input_ids_BT, attention_mask_BT, P, "logits")
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


def token_logprobs(
    model: torch.nn.Module,
    input_ids_BT: torch.Tensor,
    attention_mask_BT: torch.Tensor,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    bf16: bool = False,
    prefix_len: int = 0,
    mask_BT: torch.Tensor | None = None,
    fused_head: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(logprobs_BT, entropy_BT)``: :func:`forward_logprobs` without a value head.

    ``logprobs_BT[b, t] = log p(input_ids[b, t] | input_ids[b, :t])`` (0 at ``t = 0``, and 0 off
    ``mask_BT`` when a mask is given)."""
    out = forward_logprobs(
        model,
        input_ids_BT,
        attention_mask_BT,
        mask_BT=mask_BT,
        with_entropy=with_entropy,
        entropy_grad=entropy_grad,
        bf16=bf16,
        prefix_len=prefix_len,
        fused_head=fused_head,
    )
    return out.logprobs_BT, out.entropy_BT
