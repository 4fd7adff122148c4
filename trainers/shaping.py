"""Reward shaping and loss filtering for episodes that ran into a length limit (DAPO).

DAPO (Yu et al. 2025, "DAPO: an open-source LLM reinforcement learning system at scale",
section 3.4) found that punishing truncated samples as hard failures adds reward noise, since a
long but sound line of reasoning gets the same score as nonsense. It proposes two fixes, both
here:

- **Soft overlong punishment** (its eq. 13): no penalty while the length stays at least
  ``buffer`` tokens under the limit, then a penalty growing linearly to ``factor`` at the limit,
  added to the task reward. DAPO applies it to the response length; an agent's episode is cut by
  its context (``max_context_tokens``: prompt, turns and observations), so here ``length`` is
  the episode's whole sequence, :attr:`~skyrl_agent.types.Trajectory.input_ids`.
- **Overlong filtering**: the loss of a truncated episode is masked out. Its reward still joins
  its group's baseline (the advantages of its siblings are unchanged); only its own tokens are
  not trained on. An episode counts as truncated when it stopped on the context limit or when one
  of its turns was cut by ``max_tokens_per_turn``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from skyrl_agent.types import StopReason, Trajectory

__all__ = ["overlong_penalty", "is_truncated", "shape_overlong"]


def overlong_penalty(lengths_B: torch.Tensor, max_len: int, buffer: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment of each length (``B``), a value in ``[-factor, 0]``::

        0                                     if length <= max_len - buffer
        -factor * (length - (max_len - buffer)) / buffer   up to the limit
        -factor                               if length >= max_len

    ``buffer`` 0 turns it off (all zeros)."""
    if buffer < 0 or buffer > max_len:
        raise ValueError(f"overlong buffer must be in [0, max_len={max_len}], got {buffer}")
    lengths_B = lengths_B.to(torch.float64)
    if buffer == 0:
        return torch.zeros_like(lengths_B)
    over_B = (lengths_B - (max_len - buffer)).clamp(min=0.0, max=float(buffer))  # B, tokens into the buffer
    return -factor * over_B / buffer


def is_truncated(traj: Trajectory) -> bool:
    """Whether the episode ran into a length limit: it stopped because the next turn would not
    fit in the context, or a turn was cut by its token budget."""
    return traj.stop_reason == StopReason.CONTEXT_LIMIT or traj.truncated_turns > 0


def shape_overlong(
    trajs: Sequence[Trajectory], max_context_tokens: int, buffer: int, factor: float = 1.0
) -> tuple[list[Trajectory], dict[str, Any]]:
    """Copies of ``trajs`` with the soft overlong penalty added to their reward (the episode's
    ``reward``, its last turn reward and the reward at its last sampled token, so every
    advantage estimator sees it), and the step's numbers: how many episodes were penalised and
    the mean penalty. The originals are left as they are (the run's trajectory log keeps the
    env's rewards). Masked episodes are returned untouched."""
    if buffer == 0 or not trajs:
        return list(trajs), {}
    scored = [t for t in trajs if not t.masked]
    lengths_B = torch.tensor([len(t.prompt_ids) + len(t.response_ids) for t in scored])
    penalty_B = overlong_penalty(lengths_B, max_context_tokens, buffer, factor).tolist() if scored else []
    by_id = {id(t): p for t, p in zip(scored, penalty_B, strict=True)}
    out: list[Trajectory] = []
    for t in trajs:
        p = by_id.get(id(t), 0.0)
        out.append(t if p == 0.0 else _add_final_reward(t, p))
    hit = [p for p in penalty_B if p < 0]
    return out, {
        "overlong_penalized": len(hit),
        "overlong_penalty_mean": sum(penalty_B) / len(penalty_B) if penalty_B else 0.0,
    }


def _add_final_reward(t: Trajectory, amount: float) -> Trajectory:
    last = max((i for i, m in enumerate(t.loss_mask) if m), default=None)
    if last is None:  # nothing sampled, nothing to train on: leave it as it is
        return t
    token_rewards = list(t.token_rewards)
    token_rewards[last] += amount
    turn_rewards = list(t.turn_rewards)
    if turn_rewards:
        turn_rewards[-1] += amount
    return dataclasses.replace(
        t, reward=t.reward + amount, token_rewards=token_rewards, turn_rewards=turn_rewards
    )
