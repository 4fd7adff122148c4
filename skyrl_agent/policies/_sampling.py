"""Per-row sampling from logits: temperature, top-k, top-p, greedy, one generator per row."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from skyrl_agent.types import SamplingParams

#: Temperatures below this sample greedily: dividing logits by them overflows float32 (vLLM
#: draws the same line).
GREEDY_BELOW = 1e-5


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
    tokens = []
    for i, p in enumerate(params):
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
        tokens.append(int(torch.multinomial(probs_V, 1, generator=generators[i])))
    tokens_B = torch.tensor(tokens, dtype=torch.long, device=logits_BV.device)
    return tokens_B, raw_logprobs_BV.gather(1, tokens_B[:, None])[:, 0]
