"""The one path from episodes to training rows (trainers.rows): rows, the index back to episodes
and turns, and advantages broadcast through it."""

from __future__ import annotations

import torch

from skyrl_agent.types import Segment, StopReason, Trajectory
from trainers.batch import collate
from trainers.rows import count_rows, training_rows


def _episode(turns: int, group: int, reward: float, *, rewritten: int = 0) -> Trajectory:
    """An append-only episode of ``turns`` turns (2 sampled tokens, then 1 observation token
    each), with ``rewritten`` earlier stretches of one turn each before it."""
    response, mask, spans = [], [], []
    for t in range(turns):
        spans.append((len(response), len(response) + 2))
        response += [10 + t, 11 + t]
        mask += [1, 1]
        if t < turns - 1:
            response.append(3)
            mask.append(0)
    segments = [Segment([1, 2, 99 + s], [20, 21], [1, 1], [-0.1, -0.1], [(0, 2)]) for s in range(rewritten)]
    n_turns = turns + rewritten
    traj = Trajectory(
        prompt_ids=[1, 2],
        response_ids=response,
        loss_mask=mask,
        rollout_logprobs=[-0.5 if m else 0.0 for m in mask],
        token_rewards=[0.0] * len(response),
        reward=reward,
        stop_reason=StopReason.ENV_DONE,
        num_turns=n_turns,
        turn_rewards=[0.0] * (n_turns - 1) + [reward],
        turn_spans=spans,
        group_id=group,
        segments=segments,
        context_rewrites=rewritten,
    )
    traj.token_rewards[spans[-1][1] - 1] = reward
    traj.validate()
    return traj


def test_append_only_episodes_are_their_own_rows():
    eps = [_episode(2, 0, 1.0), _episode(3, 0, 0.0), _episode(1, 1, 1.0)]
    rows = training_rows(eps)
    assert rows.whole and all(r is e for r, e in zip(rows.rows, eps, strict=True))
    assert rows.episode == [0, 1, 2] and rows.turns == [(0, 2), (0, 3), (0, 1)] and rows.episodes == 3
    assert count_rows(eps) == 3


def test_step_wise_rows_and_the_broadcast():
    eps = [_episode(2, 0, 1.0), _episode(3, 0, 0.0)]
    rows = training_rows(eps, step_wise=True)
    assert not rows.whole and len(rows.rows) == 5 == count_rows(eps, step_wise=True)
    assert rows.episode == [0, 0, 1, 1, 1]
    assert rows.turns == [(0, 1), (1, 2), (0, 1), (1, 2), (2, 3)]
    # each row is one turn: its context is everything before it, its response the turn's tokens
    assert rows.rows[1].prompt_ids == eps[0].prompt_ids + eps[0].response_ids[:3]
    assert rows.rows[1].response_ids == [11, 12] and rows.rows[1].reward == 1.0
    batch = collate(rows.rows, pad_id=0)
    adv = rows.broadcast(torch.tensor([0.5, -0.5]), batch.mask_BT)
    assert adv.shape == batch.mask_BT.shape
    per_row = [sorted(set(r[m > 0].tolist())) for r, m in zip(adv, batch.mask_BT, strict=True)]
    assert per_row == [[0.5], [0.5], [-0.5], [-0.5], [-0.5]]
    assert (adv[batch.mask_BT == 0] == 0).all()


def test_a_rewritten_episode_gives_a_row_per_stretch_with_its_turns():
    eps = [_episode(1, 0, 1.0), _episode(2, 0, 0.0, rewritten=2)]
    rows = training_rows(eps)
    assert not rows.whole and rows.episode == [0, 1, 1, 1]
    assert rows.turns == [(0, 1), (0, 1), (1, 2), (2, 4)]
    assert [r.prompt_ids for r in rows.rows[1:3]] == [[1, 2, 99], [1, 2, 100]]
    assert count_rows(eps) == 4
    steps = training_rows(eps, step_wise=True)
    assert steps.turns == [(0, 1), (0, 1), (1, 2), (2, 3), (3, 4)]


def test_an_external_harness_episode_of_several_trajectories():
    a, b = _episode(1, 0, 1.0), _episode(2, 0, 1.0)
    c = _episode(1, 0, 0.0)
    rows = training_rows([[a, b], [c]])
    assert not rows.whole and rows.rows == [a, b, c]
    assert rows.episode == [0, 0, 1] and rows.turns == [(0, 1), (1, 3), (0, 1)]
