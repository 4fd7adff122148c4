"""Cascade attention for decode steps: rows that start with the same prompt prefix read one copy
of its keys and values.

In a batch of rows under one long system prompt (every evaluation and every GRPO step of the
main job: the same instructions, tool schema and worked examples before each question) a plain
decode step reads the prompt's keys and values once per row. Profiled on this project's 2-core
machine (2026-12-04, bf16 autocast, 32 rows over 564 columns), SDPA took 75 of a 184 ms step.
Here the prefix's KV is kept once (:class:`SharedPrefix`) and each row keeps only its own
columns (its question, earlier turns and new tokens) in the engine's buffers. A decode step
makes two calls of torch's CPU flash-attention kernel, which returns each softmax's
log-sum-exp: the rows' queries against their own columns, with the ``G`` query heads of a
key/value head as ``G`` query positions (no repeated keys); and all the rows' queries as one
batch of ``B * G`` queries against the prefix. The two partial results are merged by their
log-sum-exps, which is the softmax over all the columns: the same attention, with the prefix
read once. Timed alone (64 rows, a 540-token prefix, 180 own columns, bf16): 1.8 ms per layer
against 4.6 ms for SDPA over the concatenated columns.

:data:`CASCADE` is registered with transformers' ``AttentionInterface``. The engine switches its
own bf16 copy of the model to it (never the trainer's module) and enters :func:`cascade_step`
around a decode step. The prefix part runs in float32; the own part in the query's dtype, so
under bf16 autocast a result is rounded to bf16 twice (its own part, then the merged output)
against once in SDPA (``tests/agent/test_cascade.py`` bounds the difference).

The engine's copy runs this function even with cascade off: a masked call of several query
tokens (a prefill on top of a past, or of left-padded rows) becomes one SDPA call that reads
the shared key/value heads in place (:func:`_masked_gqa_attention`; the same numbers as
transformers' SDPA function, which copies every head for each of its query heads first). Every
other call goes to transformers' SDPA function unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from skyrl_agent._prefix import common_prefix
from skyrl_agent.models import plain_attention_call, sdpa_inputs, switch_attention

__all__ = ["CASCADE", "SharedPrefix", "cascade_step", "use_cascade_attention"]

#: The name the attention function is registered under (``model.config._attn_implementation``).
CASCADE = "skyrl_cascade"


@dataclass
class SharedPrefix:
    """One prompt prefix's KV, kept once for every row that starts with it."""

    ids: list[int]
    """The prefix's token ids (a row uses the part its prompt shares)."""
    keys: list[torch.Tensor]
    """Per layer ``[1, kv_heads, n, head_dim]``, float32 (what decode steps read)."""
    values: list[torch.Tensor]
    """Per layer ``[1, kv_heads, n, head_dim]``, float32."""
    stored: list[tuple[torch.Tensor, torch.Tensor]]
    """Per layer ``(keys, values)`` of ``[1, kv_heads, n, head_dim]`` in the cache's dtype: put
    back in front of a finished row's own columns when its KV is stored for the next turn."""
    version: int
    """The weights the KV was computed with (the engine's weights key)."""

    @classmethod
    def from_kv(
        cls, ids: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]], version: int
    ) -> SharedPrefix:
        """From per-layer ``[1, kv_heads, >= len(ids), head_dim]`` keys and values."""
        n = len(ids)
        stored = [(k[:, :, :n], v[:, :, :n]) for k, v in kv]
        return cls(
            ids=list(ids),
            keys=[k.float().contiguous() for k, _ in stored],
            values=[v.float().contiguous() for _, v in stored],
            stored=stored,
            version=version,
        )

    def shared_with(self, prompt: list[int]) -> int:
        """How many leading tokens ``prompt`` shares with :attr:`ids`."""
        n = min(len(self.ids), len(prompt))
        return n if self.ids[:n] == prompt[:n] else common_prefix(self.ids, prompt, n)


#: During a decode step: the prefix and ``[B, n]`` bool, which of its columns each row reads
#: (None: all of them, every row).
_STEP: contextvars.ContextVar[tuple[SharedPrefix, torch.Tensor | None] | None] = contextvars.ContextVar(
    "skyrl_cascade_step", default=None
)


@contextlib.contextmanager
def cascade_step(prefix: SharedPrefix, reads_BN: torch.Tensor | None) -> Iterator[None]:
    """Model calls inside attend, for row ``b``, to the prefix's columns where ``reads_BN[b]``
    is True (every column when ``reads_BN`` is None) besides the columns of the cache they are
    given."""
    token = _STEP.set((prefix, reads_BN))
    try:
        yield
    finally:
        _STEP.reset(token)


def _cascade_attention(
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

    step = _STEP.get()
    B, H, Q, D = query.shape
    KV, L = key.shape[1], key.shape[2]
    layer = getattr(module, "layer_idx", None)
    plain = plain_attention_call(query, key, attention_mask, dropout, kwargs)
    if step is not None and Q > 1 and layer is not None and plain and query.device.type == "cpu":
        return _prefill_over_prefix(step, layer, query, key, value, attention_mask, scaling), None
    if plain and Q > 1 and KV < H and attention_mask is not None and query.device.type == "cpu":
        return _masked_gqa_attention(query, key, value, attention_mask, scaling), None
    if step is None or Q != 1 or layer is None or not plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    prefix, reads_BN = step
    Kp_1KND, Vp_1KND = prefix.keys[layer], prefix.values[layer]
    N, G, M = Kp_1KND.shape[2], H // KV, B * H // KV
    scale = scaling if scaling is not None else D**-0.5
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    query, key, value = sdpa_inputs(query, key, value)
    with torch.autocast(query.device.type, enabled=False):
        # kv head k's query heads k * G .. k * G + G - 1 (transformers' repeat_kv order) become
        # G query positions over that head's keys: no repeated keys and values
        q_BKGD = query.reshape(B, KV, G, D)
        own_mask = None if attention_mask is None else _additive(attention_mask[:, :, :, :L], query.dtype)
        out_BKGD, lse_BKG = flash(q_BKGD, key, value, 0.0, False, attn_mask=own_mask, scale=scale)
        # every row's queries against the one copy of the prefix: one attention of M queries
        q_1KMD = q_BKGD.transpose(0, 1).reshape(1, KV, M, D).float()
        pre_mask = None
        if reads_BN is not None:
            pre_mask = torch.zeros((1, 1, M, N), dtype=torch.float32, device=query.device).masked_fill(
                ~reads_BN.repeat_interleave(G, 0)[None, None], float("-inf")
            )
        pre_1KMD, pre_lse_1KM = flash(q_1KMD, Kp_1KND, Vp_1KND, 0.0, False, attn_mask=pre_mask, scale=scale)
        pre_BKGD = pre_1KMD.view(KV, B, G, D).transpose(0, 1)
        pre_lse_BKG = pre_lse_1KM.view(KV, B, G).transpose(0, 1)
        # the two softmaxes merged by their log-sum-exps: the softmax over all the columns
        top = torch.maximum(lse_BKG, pre_lse_BKG)
        w_own, w_pre = torch.exp(lse_BKG - top), torch.exp(pre_lse_BKG - top)
        if reads_BN is not None:  # a row that reads no prefix column: its prefix part is void
            reads_B11 = reads_BN.any(1)[:, None, None]
            w_pre = torch.where(reads_B11, w_pre, 0.0)
            pre_BKGD = torch.where(reads_B11[..., None], pre_BKGD, 0.0)
        out = (out_BKGD.float() * w_own[..., None] + pre_BKGD * w_pre[..., None]) / (w_own + w_pre)[..., None]
    return out.to(query.dtype).reshape(B, H, 1, D).transpose(1, 2), None


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool (``True`` = attend) or additive attention mask as an additive one in ``dtype``."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))
    return mask.to(dtype)


def _prefill_over_prefix(
    step: tuple[SharedPrefix, torch.Tensor | None],
    layer: int,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
) -> torch.Tensor:
    """A prefill of ``Q`` tokens per row whose cache holds only the columns after the shared
    prefix (next turns of episodes under one system prompt): the rows' queries attend to their
    own columns under ``attention_mask`` (``[B, 1, Q, L]``: causal, padding) and, as one batch
    of ``B * H * Q`` queries, to the prefix's single copy; the two softmaxes are merged by their
    log-sum-exps. Every row reads the whole prefix (the engine only cascades such rows).
    ``[B, H, Q, D]`` in, ``[B, Q, H, D]`` out, in the query's dtype."""
    prefix, reads_BN = step
    if reads_BN is not None:
        raise ValueError("a cascaded prefill reads the whole prefix in every row")
    B, H, Q, D = query.shape
    KV = key.shape[1]
    G = H // KV
    Kp_1KND, Vp_1KND = prefix.keys[layer], prefix.values[layer]
    scale = scaling if scaling is not None else D**-0.5
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    query, key, value = sdpa_inputs(query, key, value)
    with torch.autocast(query.device.type, enabled=False):
        # query head k * G + g at position q becomes query g * Q + q of kv head k
        q_BKMD = query.reshape(B, KV, G * Q, D)
        L = key.shape[2]
        if attention_mask is None:  # no mask (SDPA's is_causal case): the queries are the last Q
            attention_mask = (
                torch.arange(L, device=query.device)[None, :]
                <= torch.arange(L - Q, L, device=query.device)[:, None]
            )[None, None]
        own_mask = _additive(attention_mask[:, :, :, :L], query.dtype).expand(B, 1, Q, L).repeat(1, 1, G, 1)
        out_BKMD, lse_BKM = flash(q_BKMD, key, value, 0.0, False, attn_mask=own_mask, scale=scale)
        # the kernel gives a query with no column log-sum-exp 0, not -inf
        sees_B1M = (own_mask > torch.finfo(own_mask.dtype).min / 2).any(-1)
        lse_BKM = lse_BKM.masked_fill(~sees_B1M, float("-inf"))
        q_1KnD = q_BKMD.transpose(0, 1).reshape(1, KV, B * G * Q, D).float()
        pre_1KnD, pre_lse_1Kn = flash(q_1KnD, Kp_1KND, Vp_1KND, 0.0, False, scale=scale)
        pre_BKMD = pre_1KnD.view(KV, B, G * Q, D).transpose(0, 1)
        pre_lse_BKM = pre_lse_1Kn.view(KV, B, G * Q).transpose(0, 1)
        top = torch.maximum(lse_BKM, pre_lse_BKM)
        w_own, w_pre = torch.exp(lse_BKM - top), torch.exp(pre_lse_BKM - top)
        # a query that sees none of its own columns (left padding) has only the prefix part
        out = (out_BKMD.float() * w_own[..., None] + pre_BKMD * w_pre[..., None]) / (w_own + w_pre)[..., None]
    return out.to(query.dtype).reshape(B, H, Q, D).transpose(1, 2)


def _masked_gqa_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    scaling: float | None,
) -> torch.Tensor:
    """A masked multi-token call (a prefill on top of a past, left-padded rows) as one SDPA call
    with ``enable_gqa``: transformers' SDPA function repeats every key/value head for each of
    its query heads first whenever a mask is given (3x the keys and values of the bundled model,
    copied per layer), since CUDA's kernels need that. Torch's CPU kernels read the shared heads
    in place: a 32-row prefill of 20 tokens over a 540-token past took 665 instead of 1150 ms on
    this project's machine (one thread, bf16). ``[B, H, Q, D]`` in, ``[B, Q, H, D]`` out."""
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous()


def use_cascade_attention(model: Any) -> bool:
    """Switch ``model`` (the engine's own copy) from SDPA to :data:`CASCADE`; returns whether it
    did. Models with another attention implementation (eager, flash, the opt-in matmul decode
    attention) are left alone."""
    # the trainer's packed attention is SDPA for every call the engine makes
    return switch_attention(model, CASCADE, _cascade_attention, from_impls=("sdpa", "skyrl_packed"))
