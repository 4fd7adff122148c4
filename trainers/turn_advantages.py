"""Turn-level credit assignment for multi-turn episodes, as pure functions.

Episode-level GRPO gives every token of an episode the advantage of its final score, so a good
lookup in an episode whose last answer was wrong is pushed down with it. The two estimators here
give each *turn* its own advantage, the episode's plus a turn-level term, and every generated
token of a turn carries its turn's value (observation tokens carry none).

- :func:`gigpo_advantages`: GiGPO (Feng et al. 2025, arXiv 2505.10978). Inside one prompt group,
  the turns taken from the same *anchor state* (an equal, hashed observation) form a step group;
  a turn's step advantage is its discounted return ``G_t = r_t + gamma G_{t+1}`` against the step
  group's mean (and std). ``A = A_episode + step_weight * A_step``. A step group of one member
  gets ``A_step = 0``, so with no repeated state GiGPO is exactly GRPO.
- :func:`mt_grpo_advantages`: turn-level rewards with their own normalization (MT-GRPO, Zeng et
  al. 2025, arXiv 2505.11821), extended from its two turns to k: a turn's *process* return (the
  env's per-turn rewards from that turn on, discounted, the outcome left out) is normalized across
  the group's episodes at the same turn index; ``A_t = A_outcome + coef * A_process_t``. A good
  early turn is then not punished for a bad final answer. With no process rewards it is GRPO on
  the outcome.

Inputs are per episode ``e`` and turn ``t`` (ragged lists); group ids are any integers (episodes
that answered the same prompt share one). Normalization is GRPO's: the group mean, and with
``normalize_std`` the unbiased std plus ``eps``; a group whose values are all equal (one member
included) gets exactly 0. Each episode counts once in its group's episode baseline, however many
turns it has (verl-agent's GiGPO lets every turn row enter the episode mean by default, which
weighs long episodes more; we do not).

:func:`episode_turns` reads the inputs off :class:`~skyrl_agent.types.Trajectory` objects and
:func:`turns_to_tokens` puts the per-turn advantages on a :class:`~trainers.batch.TrainBatch`'s
token positions; :func:`turn_level_advantages` is the two together, which the training loop calls
for ``advantage="gigpo"`` and ``advantage="mt_grpo"``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch

from skyrl_agent.episodes import Episode
from skyrl_gym.errors import ConfigError
from trainers.advantages import grpo_advantages

if TYPE_CHECKING:
    from skyrl_agent.types import Trajectory

__all__ = [
    "EpisodeTurns",
    "episode_turns",
    "gigpo_advantages",
    "mt_grpo_advantages",
    "turn_level_advantages",
    "turns_to_tokens",
]

AnchorKind = Literal["observation", "history"]


def _group_normalized(
    values: Sequence[float], keys: Sequence[Hashable], normalize_std: bool, eps: float
) -> list[float]:
    """``values`` normalized within the groups of equal ``keys``, by
    :func:`trainers.advantages.grpo_advantages` (so every estimator shares GRPO's mean, unbiased
    std + ``eps`` and all-equal groups at exactly 0)."""
    if not values:
        return []
    index: dict[Hashable, int] = {}
    ids = [index.setdefault(k, len(index)) for k in keys]
    out = grpo_advantages(
        torch.tensor(values, dtype=torch.float32),
        torch.tensor(ids),
        torch.ones(len(values), 1),
        normalize_std=normalize_std,
        eps=eps,
    )
    return out.advantages_BT[:, 0].tolist()


def _check_lengths(name: str, per_episode: Sequence[Sequence[Any]], group_ids: Sequence[int]) -> None:
    if len(per_episode) != len(group_ids):
        raise ConfigError(f"{name} has {len(per_episode)} episodes but group_ids has {len(group_ids)}")


def _returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """``G_t = r_t + gamma * G_{t+1}`` for each turn."""
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def gigpo_advantages(
    turn_rewards: Sequence[Sequence[float]],
    anchors: Sequence[Sequence[Hashable]],
    group_ids: Sequence[int],
    *,
    gamma: float = 1.0,
    step_weight: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> list[list[float]]:
    """GiGPO's advantage of each turn: ``A_episode + step_weight * A_step`` (module docstring).

    ``turn_rewards[e][t]`` is turn ``t``'s reward (the episode's score is their sum);
    ``anchors[e][t]`` the state the turn was taken from, any hashable value (equal anchors in
    the same group form a step group). An anchor that cannot be hashed raises
    :class:`ConfigError`. Keep turn counters and timestamps out of anchors, or no state repeats.
    """
    _check_lengths("turn_rewards", turn_rewards, group_ids)
    _check_lengths("anchors", anchors, group_ids)
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"GiGPO's gamma must be in [0, 1], got {gamma}")
    for e, (rewards, states) in enumerate(zip(turn_rewards, anchors, strict=True)):
        if len(rewards) != len(states):
            raise ConfigError(
                f"episode {e} has {len(rewards)} turn rewards but {len(states)} anchors (one per turn)"
            )
        for t, state in enumerate(states):
            try:
                hash(state)
            except TypeError as err:
                raise ConfigError(
                    f"the GiGPO anchor of episode {e}, turn {t} is a {type(state).__name__}, which cannot "
                    "be hashed: give each turn's state as a str, bytes, int or tuple of them"
                ) from err
    totals = [sum(map(float, r)) for r in turn_rewards]
    adv_episode = _group_normalized(totals, [int(g) for g in group_ids], normalize_std, eps)
    returns = [_returns(r, gamma) for r in turn_rewards]
    # a turn's step group: its prompt group and its anchor (the anchor itself, not its hash)
    turns = [(e, t) for e, r in enumerate(turn_rewards) for t in range(len(r))]
    adv_step = _group_normalized(
        [returns[e][t] for e, t in turns],
        [(int(group_ids[e]), anchors[e][t]) for e, t in turns],
        normalize_std,
        eps,
    )
    out = [[adv_episode[e]] * len(r) for e, r in enumerate(turn_rewards)]
    for (e, t), a in zip(turns, adv_step, strict=True):
        out[e][t] += step_weight * a
    return out


def mt_grpo_advantages(
    process_rewards: Sequence[Sequence[float]],
    outcome_rewards: Sequence[float],
    group_ids: Sequence[int],
    *,
    coef: float = 1.0,
    gamma: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> list[list[float]]:
    """Turn-level rewards with their own normalization, for k turns (module docstring).

    ``process_rewards[e][t]`` is the env's reward for turn ``t`` of episode ``e`` apart from the
    outcome (a hop followed, a query that ran); ``outcome_rewards[e]`` the episode's outcome (the
    answer's score). Turn ``t`` gets ``A_outcome + coef * A_process_t``, where ``A_process_t``
    normalizes ``sum_{s >= t} gamma^(s-t) process[s]`` across the group's episodes that have a
    turn ``t``.
    """
    _check_lengths("process_rewards", process_rewards, group_ids)
    if len(outcome_rewards) != len(group_ids):
        raise ConfigError(
            f"outcome_rewards has {len(outcome_rewards)} episodes but group_ids has {len(group_ids)}"
        )
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"MT-GRPO's gamma must be in [0, 1], got {gamma}")
    adv_outcome = _group_normalized(
        [float(r) for r in outcome_rewards], [int(g) for g in group_ids], normalize_std, eps
    )
    returns = [_returns(r, gamma) for r in process_rewards]
    # turn t is compared with the turns t of its group's other episodes
    turns = [(e, t) for e, r in enumerate(process_rewards) for t in range(len(r))]
    adv_turn = _group_normalized(
        [returns[e][t] for e, t in turns], [(int(group_ids[e]), t) for e, t in turns], normalize_std, eps
    )
    out = [[adv_outcome[e]] * len(r) for e, r in enumerate(process_rewards)]
    for (e, t), a in zip(turns, adv_turn, strict=True):
        out[e][t] += coef * a
    return out


# --------------------------------------------------------------------------- from trajectories
@dataclass(frozen=True)
class EpisodeTurns:
    """What the turn-level estimators need from one episode."""

    turn_rewards: list[float]
    """The env's reward for each turn (the grade included in the last)."""
    process_rewards: list[float]
    """Each turn's reward apart from the outcome (see :func:`episode_turns`)."""
    outcome: float
    """The episode's outcome reward."""
    anchors: list[Hashable]
    """The state each turn was taken from."""
    spans: list[tuple[int, int]]
    """``[start, end)`` of each turn inside the response."""


def episode_turns(traj: Trajectory, anchor: AnchorKind = "observation") -> EpisodeTurns:
    """The per-turn view of ``traj`` for the turn-level estimators.

    Outcome and process rewards: when the env ended the episode (``env_done``), its last turn's
    reward is the outcome and the earlier turns' rewards are process rewards; when a budget cut it
    (turns, context, deadline), the outcome is what ``env.grade()`` gave (0 without a grader) and
    every turn's own reward is a process reward.

    Anchors (token ids, so equal text rendered the same way is one state): ``"observation"``, the
    tokens the policy saw last before the turn (the prompt for the first turn, the observation
    and template tokens after the previous turn for the others), as GiGPO does; an env whose
    error message is the same whatever the state merges those states, so name the state in it.
    ``"history"``: everything before the turn, so only episodes that took token-identical
    actions share a state (a prefix tree, as in tree-structured rollouts).
    """
    if traj.segments:
        raise ConfigError(
            "turn-level advantages need append-only episodes, but this one's history was rewritten "
            "(context_strategy); use an outcome estimator (grpo, dr_grpo, rloo) with it"
        )
    if anchor not in ("observation", "history"):
        raise ConfigError(f"anchor must be 'observation' or 'history', got {anchor!r}")
    episode = Episode.of(traj)
    generated = [t for t in episode.turns if t.span is not None]
    if len(generated) != len(episode.turns) or any(t.reward is None for t in generated):
        raise ConfigError(
            f"episode {traj.prompt_id!r} sample {traj.sample_index} has {len(traj.turn_rewards)} turn rewards but "
            f"{len(generated)} turn spans: turn-level advantages need one reward per generated turn"
        )
    spans = [t.span for t in generated]
    rewards = [float(t.reward) for t in generated]
    if rewards and traj.stop_reason in ("env_done", "env_limit"):  # the env's last reward is its outcome
        outcome = rewards[-1]
        process = rewards[:-1] + [0.0]
    else:
        outcome = float(traj.grade_reward or 0.0)
        process = list(rewards)
        if process:
            process[-1] -= outcome
    for t, ((start, end), r) in enumerate(zip(spans, process, strict=True)):
        if start == end and r != 0.0:
            raise ConfigError(
                f"episode {traj.prompt_id!r} sample {traj.sample_index}: turn {t} has a reward of {r} but no "
                "generated token to carry it; give per-turn rewards only to turns the policy generated"
            )
    if anchor == "observation":  # the tokens the policy read since its previous turn
        anchors: list[Hashable] = [tuple(t.observation_ids) for t in generated]
    else:  # everything before the turn
        anchors = [tuple(traj.prompt_ids) + tuple(traj.response_ids[: t.span[0]]) for t in generated]
    return EpisodeTurns(rewards, process, outcome, anchors, spans)


def turns_to_tokens(
    turn_advantages: Sequence[Sequence[float]],
    spans: Sequence[Sequence[tuple[int, int]]],
    prompt_lengths: Sequence[int],
    mask_BT: torch.Tensor,
) -> torch.Tensor:
    """``B x T`` advantages: row ``b``'s turn ``t`` value on its span (shifted past the prompt),
    times ``mask_BT`` (so masked rows and tokens get 0)."""
    out_BT = torch.zeros(mask_BT.shape, dtype=torch.float32)
    for b, (values, turn_spans, p) in enumerate(zip(turn_advantages, spans, prompt_lengths, strict=True)):
        if len(values) != len(turn_spans):
            raise ConfigError(f"row {b} has {len(values)} turn advantages for {len(turn_spans)} turns")
        for a, (start, end) in zip(values, turn_spans, strict=True):
            if p + end > mask_BT.shape[1]:
                raise ConfigError(
                    f"row {b}'s turn span {(start, end)} runs past the batch's {mask_BT.shape[1]} tokens"
                )
            out_BT[b, p + start : p + end] = a
    return out_BT.to(mask_BT.device) * mask_BT


def turn_level_advantages(
    name: str,
    trajectories: Sequence[Trajectory],
    mask_BT: torch.Tensor,
    *,
    gamma: float = 1.0,
    coef: float = 1.0,
    anchor: AnchorKind = "observation",
    stats: dict[str, float] | None = None,
) -> torch.Tensor:
    """Token advantages of ``trajectories`` (the rows of a batch collated from them, in order)
    under ``name`` (``"gigpo"`` or ``"mt_grpo"``); ``coef`` is GiGPO's step weight or MT-GRPO's
    turn coefficient. ``stats``, when given, receives what the step's log needs to tell whether
    the turn-level term did anything: ``turn_shared_state_fraction`` (GiGPO: the share of turns
    whose step group has another member) and ``turn_process_reward_mean`` (MT-GRPO: process
    reward per turn)."""
    turns = [episode_turns(t, anchor) for t in trajectories]
    group_ids = [int(t.group_id) for t in trajectories]
    if stats is not None:
        sizes: dict[tuple[int, Hashable], int] = defaultdict(int)
        for g, x in zip(group_ids, turns, strict=True):
            for state in x.anchors:
                sizes[(g, state)] += 1
        n_turns = sum(len(x.anchors) for x in turns)
        shared = sum(n for n in sizes.values() if n > 1)
        stats["turn_shared_state_fraction"] = shared / n_turns if n_turns else 0.0
        process = [r for x in turns for r in x.process_rewards]
        stats["turn_process_reward_mean"] = sum(process) / len(process) if process else 0.0
    if name == "gigpo":
        per_turn = gigpo_advantages(
            [x.turn_rewards for x in turns],
            [x.anchors for x in turns],
            group_ids,
            gamma=gamma,
            step_weight=coef,
        )
    elif name == "mt_grpo":
        per_turn = mt_grpo_advantages(
            [x.process_rewards for x in turns], [x.outcome for x in turns], group_ids, coef=coef, gamma=gamma
        )
    else:
        raise ConfigError(f"turn-level advantage must be 'gigpo' or 'mt_grpo', got {name!r}")
    return turns_to_tokens(
        per_turn, [x.spans for x in turns], [len(t.prompt_ids) for t in trajectories], mask_BT
    )
