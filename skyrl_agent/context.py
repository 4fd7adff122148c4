"""What a long episode does when its context fills up (``RolloutConfig.context_strategy``).

- ``stop`` (the default): the episode ends with stop reason ``context_limit`` when the next
  observation would not fit in ``max_context_tokens``; the history stays append-only.
- ``drop_observations``: the oldest observations beyond the last ``keep_observations`` are
  replaced by a short placeholder (their messages stay, so tool calls and results still pair
  up), the conversation is rendered again and the episode goes on in the new, shorter context.
- ``summarize``: the env's ``summarize_history(messages) -> messages`` hook rewrites the
  history (an LLM call, a scratchpad, anything), and the episode goes on from its result.

Either rewrite triggers when the next observation plus a full turn (``max_tokens_per_turn``)
would not fit, so every turn keeps its whole token budget; if the rewritten context still does
not fit, the episode stops with ``context_limit`` as under ``stop``.

After a rewrite the history is no longer one append-only token sequence: the trajectory's
``prompt_ids``/``response_ids`` are its last stretch and each earlier stretch is a
:class:`~skyrl_agent.types.Segment` in ``Trajectory.segments``, each with the context the model
really saw. The trainer trains every stretch (or, step-wise, every turn) as its own sample with
the episode's advantage (:func:`training_samples`). Each trajectory records the strategy and how
often it fired (``context_strategy``, ``context_rewrites``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from skyrl_agent.types import Segment, Trajectory, check_context_strategy

__all__ = [
    "ContextStrategy",
    "OMITTED",
    "drop_old_observations",
    "history_stretches",
    "training_samples",
    "split_steps",
    "check_context_strategy",
]

ContextStrategy = Literal["stop", "drop_observations", "summarize"]

OMITTED = "[earlier output omitted to fit the context]"
"""What a dropped observation's content becomes."""


def drop_old_observations(
    messages: Sequence[dict[str, Any]], n_prompt: int, keep: int
) -> list[dict[str, Any]] | None:
    """``messages`` with every observation (a non-assistant message after the first
    ``n_prompt``) but the last ``keep`` replaced by :data:`OMITTED`; ``None`` when there is
    nothing left to drop."""
    obs_at = [
        i
        for i, m in enumerate(messages)
        if i >= n_prompt and m.get("role") != "assistant" and m.get("content") != OMITTED
    ]
    drop = obs_at[: max(0, len(obs_at) - keep)]
    if not drop:
        return None
    out = [dict(m) for m in messages]
    for i in drop:
        out[i]["content"] = OMITTED
    return out


def history_stretches(traj: Trajectory) -> list[Segment]:
    """Every stretch of ``traj``'s history, in order: its segments (the stretches before each
    context rewrite), then its own ids as the last one (the only one of an append-only
    episode)."""
    last = Segment(
        prompt_ids=traj.prompt_ids,
        response_ids=traj.response_ids,
        loss_mask=traj.loss_mask,
        rollout_logprobs=traj.rollout_logprobs,
        turn_spans=list(traj.turn_spans),
    )
    return [*traj.segments, last]


def training_samples(traj: Trajectory, step_wise: bool = False) -> list[Trajectory]:
    """The samples the trainer trains ``traj`` on: the trajectory itself for an append-only
    episode; one sample per stretch for an episode whose context was rewritten (each with the
    prompt the model saw); with ``step_wise``, one sample per turn (:func:`split_steps`). Every
    sample keeps the episode's ``reward``, group and ids, so advantages are the episode's; each
    sample's ``turn_rewards``/``token_rewards`` are its own turns'."""
    if not traj.segments and not step_wise:
        return [traj]
    out: list[Trajectory] = []
    turn = 0
    for seg in history_stretches(traj):
        rewards = traj.turn_rewards[turn : turn + len(seg.turn_spans)]
        turn += len(seg.turn_spans)
        token_rewards = [0.0] * len(seg.response_ids)
        for (_start, end), r in zip(seg.turn_spans, rewards, strict=False):
            token_rewards[end - 1] += r
        sample = _sample(
            traj,
            prompt_ids=seg.prompt_ids,
            response_ids=seg.response_ids,
            loss_mask=seg.loss_mask,
            rollout_logprobs=seg.rollout_logprobs,
            token_rewards=token_rewards,
            turn_rewards=list(rewards),
            turn_spans=list(seg.turn_spans),
        )
        if seg.turn_spans:
            out += split_steps(sample) if step_wise else [sample]
    return out


def split_steps(traj: Trajectory) -> list[Trajectory]:
    """One training sample per turn of an append-only trajectory (step-wise training).

    Sample ``t`` has ``prompt_ids`` = everything before turn ``t`` (the prompt, earlier turns and
    observations) and ``response_ids`` = the tokens of turn ``t`` alone (all mask 1), with the
    turn's reward at its last token. ``reward`` stays the episode's total, so advantages can be
    computed per episode and shared by its steps; ``turn_rewards`` holds the one turn's reward.
    For a trajectory whose context was rewritten, use :func:`training_samples` (it splits every
    stretch)."""
    samples = []
    for t, (start, end) in enumerate(traj.turn_spans):
        turn_reward = traj.turn_rewards[t] if t < len(traj.turn_rewards) else 0.0
        n = end - start
        samples.append(
            _sample(
                traj,
                prompt_ids=traj.prompt_ids + traj.response_ids[:start],
                response_ids=traj.response_ids[start:end],
                loss_mask=[1] * n,
                rollout_logprobs=traj.rollout_logprobs[start:end]
                if traj.rollout_logprobs is not None
                else None,
                token_rewards=[0.0] * (n - 1) + [turn_reward],
                turn_rewards=[turn_reward],
                turn_spans=[(0, n)],
                env_metrics=dict(traj.env_metrics),
            )
        )
    return samples


def _sample(traj: Trajectory, **stretch: Any) -> Trajectory:
    """A training sample of ``traj``: its episode fields (reward, stop reason, ids, errors, the
    context strategy) with the given stretch of tokens, an append-only one (no segments, no
    text messages)."""
    return dataclasses.replace(
        traj,
        num_turns=len(stretch["turn_spans"]),
        truncated_turns=0,
        messages=[],
        segments=[],
        turns=[],
        **stretch,
    )
