"""Per-row sampling from logits (temperature, top-k, top-p, greedy, one generator per row), the
batched prefill and the stop-string search: shared by the engine and the static micro-batcher."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from skyrl_agent.models import output_cache
from skyrl_agent.types import GREEDY_BELOW, SamplingParams


def sample_rows(
    logits_BV: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return ``(tokens_B, raw_logprobs_B)``.

    ``raw_logprobs_B`` is the log-probability of each drawn token under ``log_softmax(logits)``
    at temperature 1, before any filter (what a PPO ratio needs), not under the filtered,
    tempered distribution the token was drawn from.

    Temperatures below :data:`GREEDY_BELOW` are greedy, and top-p always keeps the most likely
    token, so no valid :class:`SamplingParams` leaves a row with nothing to draw from.
    """
    logits_BV = logits_BV.float()
    raw_logprobs_BV = torch.log_softmax(logits_BV, dim=-1)
    plain = [
        i for i, p in enumerate(params) if p.temperature >= GREEDY_BELOW and not p.top_k and p.top_p >= 1.0
    ]
    drawn = _draw_plain(
        logits_BV, [params[i].temperature for i in plain], [generators[i] for i in plain], plain
    )
    tokens = []
    for i, p in enumerate(params):
        if i in drawn:
            tokens.append(drawn[i])
            continue
        row_V = logits_BV[i]
        if p.temperature < GREEDY_BELOW:
            tokens.append(int(torch.argmax(row_V)))
            continue
        row_V = row_V / p.temperature
        if 0 < p.top_k < row_V.shape[-1]:
            kth = torch.topk(row_V, p.top_k).values[-1]
            row_V = row_V.masked_fill(row_V < kth, float("-inf"))
        probs_V = torch.softmax(row_V, dim=-1)
        if p.top_p < 1.0:
            sorted_p, order = torch.sort(probs_V, descending=True)
            cum = torch.cumsum(sorted_p, dim=-1)
            drop_sorted = cum - sorted_p >= p.top_p  # keep tokens until the mass reaches top_p
            drop_sorted[0] = False  # the most likely token always stays
            drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
            probs_V = probs_V.masked_fill(drop, 0.0)
        tokens.append(draw(probs_V, generators[i]))
    tokens_B = torch.tensor(tokens, dtype=torch.long, device=logits_BV.device)
    return tokens_B, raw_logprobs_BV.gather(1, tokens_B[:, None])[:, 0]


def _draw_plain(
    logits_BV: torch.Tensor, temperatures: list[float], generators: list[torch.Generator], rows: list[int]
) -> dict[int, int]:
    """The rows without top-k or top-p (the training and evaluation samplers' rows) drawn
    together: the same numbers as :func:`draw` on each row's tempered softmax (the kernels
    reduce each row on its own; ``tests/agent/test_hf_policy.py`` checks the tokens), one
    uniform from each row's generator, one ``searchsorted`` for all. Returns ``{row: token}``."""
    if len(rows) < 2:
        return {}
    idx = torch.as_tensor(rows, device=logits_BV.device)
    sub_BV = logits_BV.index_select(0, idx)
    # the same division as a row's ``row_V / temperature`` (a float32 row by a Python float)
    probs_BV = torch.softmax(torch.stack([sub_BV[j] / t for j, t in enumerate(temperatures)]), dim=-1)
    cum_BV = torch.cumsum(probs_BV, dim=-1)
    u_B = torch.stack(
        [torch.rand((), generator=g, device=cum_BV.device, dtype=cum_BV.dtype) for g in generators]
    )
    picks = torch.searchsorted(cum_BV, (u_B * cum_BV[:, -1])[:, None], right=True)[:, 0].tolist()
    out = {}
    for j, (row, pick) in enumerate(zip(rows, picks, strict=True)):
        if pick >= cum_BV.shape[-1]:  # u * total rounded up to total: the last token of positive weight
            pick = int((probs_BV[j] > 0).nonzero()[-1])
        out[row] = pick
    return out


def draw(probs_V: torch.Tensor, generator: torch.Generator) -> int:
    """One index drawn from the (unnormalised) weights ``probs_V`` by inverting their CDF with
    one uniform number: exact, and far cheaper than ``torch.multinomial``, which draws an
    exponential variate for every entry of the vocabulary (measured here: 1.4 ms a row for
    49,152 entries, 40 ms of a 290 ms decode step of 32 rows). A token of weight 0 is never
    drawn: the first cumulative sum above ``u * total`` belongs to a token of positive weight."""
    cum_V = torch.cumsum(probs_V, dim=-1)
    u = torch.rand((), generator=generator, device=probs_V.device, dtype=cum_V.dtype)
    idx = int(torch.searchsorted(cum_V, u * cum_V[-1], right=True))
    if idx >= probs_V.shape[-1]:  # u * total rounded up to total: the last token of positive weight
        idx = int((probs_V > 0).nonzero()[-1])
    return idx


def find_stop(tokenizer: Any, ids: list[int], stops: tuple[str, ...]) -> str | None:
    """The first of ``stops`` that the decoded tail of ``ids`` contains, or None. The tail is
    long enough to hold the longest stop string: a token is at least one character, or one byte
    of a character of at most 4 UTF-8 bytes."""
    tail = ids[-(4 * max(len(s) for s in stops) + 4) :]
    text = tokenizer.decode(tail, skip_special_tokens=False)
    return next((s for s in stops if s in text), None)


def _last_position(length: int, device: torch.device) -> torch.Tensor:
    """``logits_to_keep`` for the last of ``length`` positions, as an index tensor.

    The integer form (``1``) slices the hidden states to a strided view, and on CPU torch's
    ``linear`` then copies the whole transposed output head for it (bf16: 56 MB for the bundled
    model, about 120 ms of a 200 ms one-row prefill on this project's 2-core machine). Indexing
    with a tensor gives a contiguous row, which the head multiplies in place."""
    return torch.tensor([length - 1], device=device)


def prefill(
    model: Any,
    cache_kwarg: str,
    pad_token_id: int,
    tails: list[list[int]],
    *,
    min_shared_prefix: int,
    past: Any = None,
    past_len: int = 0,
    past_valid_BP: torch.Tensor | None = None,
    position_offset: int = 0,
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Run ``tails`` through ``model`` as one left-padded batch on top of ``past`` (a one-row
    cache of ``past_len`` columns that every row continues, or None; or, with ``past_valid_BP``,
    a B-row cache whose real columns it marks); return ``(cache, last logits_BV, attention
    mask_BT, position ids_BS of the tails' block, tokens shared)``.

    Rows often share a long prefix (a system prompt, a worked example, the same prompt for every
    sample of a GRPO group). The longest prefix common to all tails (at least
    ``min_shared_prefix`` tokens) is computed once for one row, on top of ``past``, and the KV is
    repeated to every row; only the rest of each prompt runs per row, left-padded inside that
    block with position ids that skip the padding. The result equals running every full prompt
    (a test checks logits and samples). ``position_offset``: tokens before the cache's first
    column (a shared prefix the attention reads elsewhere: a cascaded prefill)."""
    B, dev = len(tails), next(model.parameters()).device
    shared = 0
    if B > 1 and past_valid_BP is None:
        shortest, first = min(len(x) for x in tails), tails[0]
        while shared < shortest - 1 and all(x[shared] == first[shared] for x in tails):
            shared += 1
        if shared < min_shared_prefix:
            shared = 0
    cache = past
    if shared:
        prefix = torch.as_tensor(tails[0][:shared], dtype=torch.long, device=dev)[None]  # 1 x S0
        kwargs0: dict[str, Any] = {cache_kwarg: past} if past is not None else {}
        out = model(
            input_ids=prefix,
            attention_mask=torch.ones((1, past_len + shared), dtype=torch.long, device=dev),
            position_ids=torch.arange(past_len, past_len + shared, device=dev)[None] + position_offset,
            use_cache=True,
            logits_to_keep=_last_position(shared, dev),
            **kwargs0,
        )
        cache = output_cache(out)
    if cache is not None and B > 1 and past_valid_BP is None:
        cache.batch_repeat_interleave(B)
    P = past_len + shared  # columns already in the cache, valid for every row
    suffixes = [x[shared:] for x in tails]
    S = max(len(x) for x in suffixes)
    ids_BS = torch.full((B, S), pad_token_id, dtype=torch.long)
    mask_BS = torch.zeros((B, S), dtype=torch.long)
    for i, x in enumerate(suffixes):  # left padding: every row's last token at the end
        ids_BS[i, S - len(x) :] = torch.as_tensor(x, dtype=torch.long)
        mask_BS[i, S - len(x) :] = 1
    ids_BS, mask_BS = ids_BS.to(dev), mask_BS.to(dev)
    past_BP = mask_BS.new_ones((B, P)) if past_valid_BP is None else past_valid_BP.to(mask_BS)
    attn_BT = torch.cat([past_BP, mask_BS], dim=1)  # B x (P + S)
    pos_BS = (attn_BT.cumsum(-1) - 1).clamp(min=0)[:, P:] + position_offset
    kwargs: dict[str, Any] = {cache_kwarg: cache} if cache is not None else {}
    out = model(
        input_ids=ids_BS,
        attention_mask=attn_BT,
        position_ids=pos_BS,
        use_cache=True,
        logits_to_keep=_last_position(S, dev),
        **kwargs,
    )
    return output_cache(out), out.logits[:, -1, :].float(), attn_BT, pos_BS, shared
