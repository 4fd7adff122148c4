"""Turn-level credit assignment (GiGPO, MT-GRPO for k turns): hand-worked values, degenerate
cases, the trajectory view and the trainer's wiring."""

from __future__ import annotations

import json

import pytest
import torch

from skyrl_agent.types import Segment, StopReason, Trajectory
from skyrl_gym.errors import ConfigError
from trainers.advantages import compute_advantages, episode_advantages, grpo_advantages
from trainers.config import TrainConfig
from trainers.rollouts import select_trainable
from trainers.turn_advantages import (
    episode_turns,
    gigpo_advantages,
    mt_grpo_advantages,
    turn_level_advantages,
    turns_to_tokens,
)


def _approx(rows: list[list[float]]) -> list:
    return [pytest.approx(r, abs=1e-4) for r in rows]


# --------------------------------------------------------------------------- GiGPO
def test_gigpo_hand_worked_two_turn_group():
    # 4 two-turn episodes of one prompt, all from s0; T1 and T4: s0 -> s1a -> win, T2: s0 -> s1a
    # -> fail, T3: s0 -> s1b -> win. gamma 0.95, mean-only normalization (GiGPO's mean_norm).
    rewards = [[0, 1], [0, 0], [0, 1], [0, 1]]
    anchors = [["s0", "s1a"], ["s0", "s1a"], ["s0", "s1b"], ["s0", "s1a"]]
    adv = gigpo_advantages(rewards, anchors, [7, 7, 7, 7], gamma=0.95, normalize_std=False)
    # episode: [0.25, -0.75, 0.25, 0.25]; s0 group (returns 0.95, 0, 0.95, 0.95; mean 0.7125):
    # +0.2375 / -0.7125; s1a group (1, 0, 1; mean 2/3): +1/3 / -2/3; s1b alone: 0
    assert adv == _approx([[0.4875, 0.5833], [-1.4625, -1.4167], [0.4875, 0.25], [0.4875, 0.5833]])
    half = gigpo_advantages(rewards, anchors, [7, 7, 7, 7], gamma=0.95, step_weight=0.5, normalize_std=False)
    assert half[2] == pytest.approx([0.25 + 0.5 * 0.2375, 0.25], abs=1e-4)


def test_gigpo_with_no_repeated_state_is_grpo():
    rewards = [[0, 1], [0, 0, 0], [1], [0, 0.5], [0, 0]]
    groups = [0, 0, 0, 1, 1]
    anchors = [[f"e{e}t{t}" for t in range(len(r))] for e, r in enumerate(rewards)]
    adv = gigpo_advantages(rewards, anchors, groups)
    totals = torch.tensor([sum(r) for r in rewards], dtype=torch.float32)
    grpo = grpo_advantages(totals, torch.tensor(groups), torch.ones(5, 1)).advantages_BT[:, 0].tolist()
    for row, a in zip(adv, grpo, strict=True):
        assert row == pytest.approx([a] * len(row), abs=1e-5)


def test_gigpo_one_turn_episodes_from_one_prompt_double_the_grpo_advantage():
    # the prompt is every episode's first state, so its step group is the whole prompt group
    adv = gigpo_advantages([[1.0], [0.0], [0.0], [1.0]], [["p"]] * 4, [0, 0, 0, 0])
    grpo = grpo_advantages(torch.tensor([1.0, 0, 0, 1]), torch.tensor([0, 0, 0, 0]), torch.ones(4, 1))
    assert [r[0] for r in adv] == pytest.approx((2 * grpo.advantages_BT[:, 0]).tolist(), abs=1e-5)


def test_gigpo_step_groups_stay_inside_their_prompt_group():
    # the same anchor text under two prompts is two states
    adv = gigpo_advantages([[1.0], [0.0]], [["x"], ["x"]], [0, 1], normalize_std=False)
    assert adv == [[0.0], [0.0]]


def test_gigpo_refuses_unhashable_anchors_and_ragged_inputs():
    with pytest.raises(ConfigError, match=r"episode 1, turn 0 is a list, which cannot be hashed"):
        gigpo_advantages([[0.0], [1.0]], [["a"], [["not", "hashable"]]], [0, 0])
    with pytest.raises(ConfigError, match="2 turn rewards but 1 anchors"):
        gigpo_advantages([[0.0, 1.0]], [["a"]], [0])
    with pytest.raises(ConfigError, match="group_ids has 2"):
        gigpo_advantages([[0.0]], [["a"]], [0, 0])
    with pytest.raises(ConfigError, match="gamma"):
        gigpo_advantages([[0.0]], [["a"]], [0], gamma=1.5)


# --------------------------------------------------------------------------- MT-GRPO
def test_mt_grpo_hand_worked_search_then_answer():
    # group of 3: turn reward (search found the answer) [1, 0, 1], outcome [1, 0, 0]
    adv = mt_grpo_advantages([[1, 0], [0, 0], [1, 0]], [1, 0, 0], [0, 0, 0])
    # A_T = [1, -2, 1] / sqrt(3), A_O = [2, -1, -1] / sqrt(3) (MT-GRPO's code adds 1e-4 to the
    # std, which gives 1.7318 where this gives sqrt(3))
    r3 = 3**0.5
    assert adv == _approx([[r3, 2 / r3], [-r3, -1 / r3], [0.0, -1 / r3]])
    # episode 3 (good search, wrong answer) is not punished on its search turn


def test_mt_grpo_k_turns_ragged_with_discount():
    # A: 3 turns, process [0, 1, 0]; B: 2 turns, [1, 0]; equal outcomes; gamma 0.5, mean only.
    # turn 0 returns [0.5, 1] -> [-0.25, 0.25]; turn 1 [1, 0] -> [0.5, -0.5]; turn 2: A alone -> 0
    adv = mt_grpo_advantages([[0, 1, 0], [1, 0]], [0, 0], [3, 3], gamma=0.5, normalize_std=False)
    assert adv == _approx([[-0.25, 0.5, 0.0], [0.25, -0.5]])
    doubled = mt_grpo_advantages(
        [[0, 1, 0], [1, 0]], [0, 0], [3, 3], coef=2.0, gamma=0.5, normalize_std=False
    )
    assert doubled == _approx([[-0.5, 1.0, 0.0], [0.5, -1.0]])


def test_mt_grpo_without_process_rewards_is_grpo_on_the_outcome():
    adv = mt_grpo_advantages([[0, 0, 0], [0], [0, 0]], [1.0, 0.0, 0.5], [0, 0, 0])
    grpo = grpo_advantages(torch.tensor([1.0, 0, 0.5]), torch.tensor([0, 0, 0]), torch.ones(3, 1))
    for row, a in zip(adv, grpo.advantages_BT[:, 0].tolist(), strict=True):
        assert row == pytest.approx([a] * len(row), abs=1e-5)
    with pytest.raises(ConfigError, match="outcome_rewards has 1"):
        mt_grpo_advantages([[0], [0]], [1.0], [0, 0])


# --------------------------------------------------------------------------- from trajectories
def _traj(
    turns: list[tuple[list[int], list[int], float]],
    *,
    prompt: tuple[int, ...] = (1, 2),
    stop: StopReason = StopReason.ENV_DONE,
    grade: float | None = None,
    group: int = 0,
    sample: int = 0,
) -> Trajectory:
    """Each turn: (observation ids before it, the sampled ids, its reward); the first turn's
    observation is left empty (the prompt is its observation)."""
    resp, mask, rewards, spans, turn_rewards = [], [], [], [], []
    for obs, act, r in turns:
        resp += obs
        mask += [0] * len(obs)
        rewards += [0.0] * len(obs)
        spans.append((len(resp), len(resp) + len(act)))
        resp += act
        mask += [1] * len(act)
        rewards += [0.0] * len(act)
        if act:
            rewards[-1] = r
        turn_rewards.append(r)
    total = sum(turn_rewards)
    t = Trajectory(
        prompt_ids=list(prompt), response_ids=resp, loss_mask=mask, rollout_logprobs=None,
        token_rewards=rewards, reward=total, stop_reason=stop, num_turns=len(turns),
        turn_rewards=turn_rewards, turn_spans=spans, grade_reward=grade, group_id=group,
        sample_index=sample, prompt_id="p",
    )  # fmt: skip
    t.validate()
    return t


def test_episode_turns_splits_outcome_from_process_rewards():
    done = episode_turns(_traj([([], [5, 6], 0.2), ([9], [7], 0.2), ([9], [8], 1.0)]))
    assert done.outcome == 1.0 and done.process_rewards == [0.2, 0.2, 0.0]
    # a budget cut it: the grader's reward (already in the last turn) is the outcome
    cut = episode_turns(_traj([([], [5], 0.2), ([9], [7], 0.5)], stop=StopReason.MAX_TURNS, grade=0.3))
    assert cut.outcome == 0.3 and cut.process_rewards == pytest.approx([0.2, 0.2])
    ungraded = episode_turns(_traj([([], [5], 0.2)], stop=StopReason.MAX_TURNS))
    assert ungraded.outcome == 0.0 and ungraded.process_rewards == [0.2]


def test_episode_turns_anchors():
    t = _traj([([], [5, 6], 0.0), ([9, 10], [7], 0.0), ([9, 10], [8], 1.0)])
    obs = episode_turns(t, "observation").anchors
    assert obs == [(1, 2), (9, 10), (9, 10)]  # the prompt, then the observation before each turn
    hist = episode_turns(t, "history").anchors
    assert hist == [(1, 2), (1, 2, 5, 6, 9, 10), (1, 2, 5, 6, 9, 10, 7, 9, 10)]
    with pytest.raises(ConfigError, match="anchor must be"):
        episode_turns(t, "state")  # type: ignore[arg-type]


def test_episode_turns_refuses_rewards_without_tokens_and_rewritten_histories():
    empty = _traj([([], [], 0.5), ([9], [7], 1.0)])  # a turn that generated nothing, rewarded
    with pytest.raises(ConfigError, match="turn 0 has a reward of 0.5 but no generated token"):
        episode_turns(empty)
    fine = _traj([([], [], 0.0), ([9], [7], 1.0)])  # an empty turn without reward is fine
    assert episode_turns(fine).spans == [(0, 0), (1, 2)]
    rewritten = _traj([([], [5], 1.0)])
    rewritten.segments = [
        Segment(prompt_ids=[1], response_ids=[5], loss_mask=[1], rollout_logprobs=None, turn_spans=[(0, 1)])
    ]
    with pytest.raises(ConfigError, match="rewritten"):
        episode_turns(rewritten)
    odd = _traj([([], [5], 1.0)])
    odd.turn_rewards = [0.0, 1.0]
    with pytest.raises(ConfigError, match="2 turn rewards but 1 turn spans"):
        episode_turns(odd)


def test_turns_to_tokens_puts_each_turn_on_its_span_past_the_prompt():
    mask_BT = torch.tensor([[0, 0, 1, 1, 0, 1, 0], [0, 1, 0, 1, 1, 0, 0]], dtype=torch.float32)
    out = turns_to_tokens([[0.5, -1.0], [2.0, 3.0]], [[(0, 2), (3, 4)], [(0, 1), (2, 4)]], [2, 1], mask_BT)
    assert out.tolist() == [[0, 0, 0.5, 0.5, 0, -1.0, 0], [0, 2.0, 0, 3.0, 3.0, 0, 0]]
    masked = turns_to_tokens([[1.0, 1.0]], [[(0, 2), (3, 4)]], [2], torch.zeros(1, 7))
    assert masked.abs().sum() == 0  # a row whose tokens train nothing carries nothing
    with pytest.raises(ConfigError, match="runs past"):
        turns_to_tokens([[1.0]], [[(0, 9)]], [2], mask_BT[:1])


def test_turn_level_advantages_through_collate():
    from trainers.batch import collate

    # a group of two: the first follows a lookup and wins, the second errs on its first turn
    trajs = [
        _traj([([], [5, 6], 0.1), ([9, 9], [7], 1.0)], group=4, sample=0),
        _traj([([], [5, 8], 0.0), ([3, 3], [7], 0.0)], group=4, sample=1),
    ]
    batch = collate(trajs, pad_id=0)
    out = turn_level_advantages("mt_grpo", trajs, batch.mask_BT)
    per_turn = mt_grpo_advantages([[0.1, 0.0], [0.0, 0.0]], [1.0, 0.0], [4, 4])
    expect = turns_to_tokens(per_turn, [t.turn_spans for t in trajs], [2, 2], batch.mask_BT)
    assert torch.equal(out, expect) and out[0, 2].item() > out[0, 6].item() > 0
    assert (out[batch.mask_BT == 0] == 0).all()
    stats: dict[str, float] = {}
    gigpo = turn_level_advantages("gigpo", trajs, batch.mask_BT, stats=stats)
    # the prompt is shared (2 of 4 turns), the two second turns saw different observations
    assert stats == {"turn_shared_state_fraction": 0.5, "turn_process_reward_mean": pytest.approx(0.025)}
    # both share the prompt (step group = the whole group), then different observations
    assert gigpo[0, 2].item() == pytest.approx(2 * gigpo[0, 6].item(), abs=1e-5)
    with pytest.raises(ConfigError, match="gigpo"):
        turn_level_advantages("grpo", trajs, batch.mask_BT)


def test_turn_level_estimators_are_refused_where_they_cannot_run():
    with pytest.raises(ConfigError, match="turn_level_advantages"):
        compute_advantages("gigpo", torch.ones(1, 2), rewards_B=torch.ones(1), group_ids_B=torch.zeros(1))
    with pytest.raises(ConfigError, match="outcome estimator"):
        episode_advantages("mt_grpo", torch.tensor([1.0]), torch.tensor([0]))
    with pytest.raises(ConfigError, match="step-wise"):
        TrainConfig(advantage="gigpo", step_wise=True)
    with pytest.raises(ConfigError, match="context-strategy stop"):
        TrainConfig(advantage="mt_grpo", context_strategy="drop_observations")
    with pytest.raises(ConfigError, match="group_size >= 2"):
        TrainConfig(advantage="gigpo", group_size=1)
    with pytest.raises(ConfigError, match="gamma"):
        TrainConfig(advantage="gigpo", gamma=1.2)
    cfg = TrainConfig(advantage="gigpo", gigpo_anchor="history", turn_advantage_coef=0.5)
    assert cfg.algorithm.turn_advantage_coef == 0.5


def test_a_group_with_equal_totals_but_different_turns_still_trains_by_turn():
    a = _traj([([], [5], 1.0), ([9], [7], 0.0)], group=1, sample=0)
    b = _traj([([], [5], 0.0), ([9], [7], 1.0)], group=1, sample=1)
    _, flat, trainable = select_trainable([a, b], True)
    assert flat == {1} and trainable == []
    _, flat, trainable = select_trainable([a, b], True, turns=True)
    assert flat == set() and len(trainable) == 2
    same = _traj([([], [5], 1.0), ([9], [7], 0.0)], group=1, sample=1)
    assert select_trainable([a, same], True, turns=True)[1] == {1}


@pytest.mark.slow
@pytest.mark.parametrize("advantage", ["gigpo", "mt_grpo"])
def test_training_on_kvchain_with_turn_level_advantages(tmp_path, advantage):
    from skyrl_agent.models import tiny_random_model
    from trainers.loop import train

    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    cfg = TrainConfig(
        env="kvchain", model=str(tmp_path / "model"), run_dir=str(tmp_path / "run"), steps=2,
        prompts_per_step=2, group_size=4, train_prompts=20, eval_prompts=0, max_turns=3,
        max_tokens_per_turn=8, stop=(), advantage=advantage, skip_equal_reward_groups=False,
        bf16=False, temperature=1.0, progress=False, threads=1, checkpoint_every=10,
    )  # fmt: skip
    train(cfg)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in steps] == [1, 2]
    logged = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert sum(t["num_turns"] for t in logged) > len(logged)  # the random model's replies take several turns
    assert all(r["num_sequences"] == 8 for r in steps)
    assert all(0.0 <= r["turn_shared_state_fraction"] <= 1.0 for r in steps)
