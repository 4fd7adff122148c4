"""DAPO's overlong shaping and filtering, and dynamic sampling, against hand-worked values."""

from __future__ import annotations

import pytest
import torch

from skyrl_agent.types import PromptItem, StopReason, Trajectory
from skyrl_gym.errors import ConfigError
from trainers import rollouts
from trainers.config import TrainConfig
from trainers.data import PromptSampler
from trainers.distributed import SINGLE
from trainers.shaping import is_truncated, overlong_penalty, shape_overlong


def traj(n_prompt: int, n_resp: int, reward: float, **kw) -> Trajectory:
    return Trajectory(
        prompt_ids=[1] * n_prompt,
        response_ids=[2] * n_resp,
        loss_mask=[1] * n_resp,
        rollout_logprobs=None,
        token_rewards=[0.0] * (n_resp - 1) + [reward],
        reward=reward,
        stop_reason=kw.pop("stop_reason", StopReason.ENV_DONE),
        num_turns=1,
        turn_rewards=[reward],
        turn_spans=[(0, n_resp)],
        **kw,
    )


def test_overlong_penalty_by_hand():
    # limit 100, buffer 20: free up to 80, then -1/20 per token, -1 at 100 and beyond
    got = overlong_penalty(torch.tensor([50, 80, 85, 95, 100, 130]), max_len=100, buffer=20)
    assert got.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.75, -1.0, -1.0])
    assert overlong_penalty(torch.tensor([90]), 100, 20, factor=0.5).item() == pytest.approx(-0.25)
    assert overlong_penalty(torch.tensor([100]), 100, 0).item() == 0.0  # buffer 0: off
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(torch.tensor([1]), 100, 101)


def test_shape_overlong_moves_every_reward_view_and_keeps_the_original():
    short, long_ = traj(10, 30, 1.0), traj(10, 80, 1.0)  # lengths 40 and 90 of 100, buffer 20
    masked = traj(10, 85, 0.0, masked=True)
    shaped, stats = shape_overlong([short, long_, masked], max_context_tokens=100, buffer=20)
    assert shaped[0] is short and shaped[2] is masked  # untouched: not in the buffer / never scored
    s = shaped[1]
    assert s.reward == pytest.approx(0.5) and s.turn_rewards == [pytest.approx(0.5)]
    assert s.token_rewards[-1] == pytest.approx(0.5) and sum(s.token_rewards) == pytest.approx(s.reward)
    assert long_.reward == 1.0 and long_.token_rewards[-1] == 1.0  # the log keeps the env's reward
    assert stats == {"overlong_penalized": 1, "overlong_penalty_mean": pytest.approx(-0.25)}
    assert shape_overlong([short], 100, 0) == ([short], {})


def test_truncated_means_a_length_limit_was_hit():
    assert is_truncated(traj(1, 2, 0.0, stop_reason=StopReason.CONTEXT_LIMIT))
    assert is_truncated(traj(1, 2, 0.0, truncated_turns=1))
    assert not is_truncated(traj(1, 2, 0.0, stop_reason=StopReason.MAX_TURNS))


def test_config_refuses_what_cannot_work():
    with pytest.raises(ConfigError, match="skip_equal_reward_groups"):
        TrainConfig(dynamic_sampling=True, skip_equal_reward_groups=False)
    with pytest.raises(ConfigError, match="overlong_buffer"):
        TrainConfig(overlong_buffer=5000, max_context_tokens=2048)
    with pytest.raises(ConfigError, match="max_sampling_rounds"):
        TrainConfig(max_sampling_rounds=0)


# ---------------------------------------------------------------- dynamic sampling


def fake_play(informative_ids: set[str]):
    """A stand-in for rollouts.play: a prompt's group has mixed rewards iff its id is listed."""
    calls = []

    def play(policy, items, rollout, env_config=(), *, n_samples, seed, dist=SINGLE, first_group=0):
        calls.append([it.prompt_id for it in items])
        out = []
        for g, it in enumerate(items):
            for i in range(n_samples):
                r = float(i % 2) if it.prompt_id in informative_ids else 1.0
                out.append(traj(3, 4, r, prompt_id=it.prompt_id, group_id=first_group + g, sample_index=i))
        return out

    return play, calls


def items(n: int) -> list[PromptItem]:
    return [
        PromptItem(env_id="calculator", prompt=[{"role": "user", "content": str(i)}], prompt_id=f"p{i}")
        for i in range(n)
    ]


def run_step(monkeypatch, informative: set[str], **cfg_kw):
    play, calls = fake_play(informative)
    monkeypatch.setattr(rollouts, "play", play)
    sampler = PromptSampler(items(40), seed=0)
    order = [it.prompt_id for it in PromptSampler(items(40), seed=0).next(40)]
    cfg = TrainConfig(prompts_per_step=4, group_size=2, **cfg_kw)
    rb = rollouts.rollout_step(None, sampler, cfg, SINGLE, step=1, version=0)
    return rb, calls, order, sampler


def test_dynamic_sampling_fills_the_batch_with_informative_groups(monkeypatch):
    # in sampling order, informative prompts are the 1st, 3rd, 5th, ...: 2 of the first 4
    order = [it.prompt_id for it in PromptSampler(items(40), seed=0).next(40)]
    informative = set(order[0::2])
    rb, calls, _, sampler = run_step(monkeypatch, informative, dynamic_sampling=True)
    # round 1: 4 prompts, 2 informative (rate 1/2); round 2: the 2 missing / 0.5 = 4 prompts
    assert [len(c) for c in calls] == [4, 4] and rb.sampling_rounds == 2 and rb.prompts_drawn == 8
    groups = {}
    for t in rb.trajectories:
        groups.setdefault(t.group_id, set()).add(t.prompt_id)
    assert all(len(p) == 1 for p in groups.values())  # group ids unique over the rounds
    mixed = {g for g in groups if len({t.reward for t in rb.trajectories if t.group_id == g}) > 1}
    assert len(mixed) == 4  # exactly a full batch of informative groups
    assert len(groups) == 8 and sampler.state_dict()["index"] == 8  # flat ones kept, logged


def test_dynamic_sampling_drops_the_surplus_and_stops_at_the_round_cap(monkeypatch):
    order = [it.prompt_id for it in PromptSampler(items(40), seed=0).next(40)]
    # round 1: only the 1st of 4 is informative (rate 1/4): 3 missing / 0.25 = 12, capped at 8;
    # round 2 (the 5th..12th) finds 8 more: 9 > 4, the last 5 are dropped whole
    informative = {order[0], *order[4:12]}
    rb, calls, _, _ = run_step(monkeypatch, informative, dynamic_sampling=True)
    assert [len(c) for c in calls] == [4, 8]
    assert {t.prompt_id for t in rb.trajectories} & informative == {order[0], *order[4:7]}
    assert {t.prompt_id for t in rb.trajectories} - informative == set(order[1:4])  # flat, kept
    rb, calls, _, _ = run_step(monkeypatch, set(), dynamic_sampling=True, max_sampling_rounds=3)
    assert len(calls) == 3 and rb.sampling_rounds == 3  # nothing informative: the cap ends it
    rb, calls, _, _ = run_step(monkeypatch, set())
    assert len(calls) == 1 and rb.sampling_rounds == 1 and rb.prompts_drawn == 4  # off: one round


@pytest.mark.slow
def test_a_run_with_dynamic_sampling_overlong_shaping_and_prompt_mean(tmp_path):
    """The features through the real loop (a tiny random model; a coin-flip env, so groups are
    informative about half the time): dynamic sampling tops the batch up to 2 informative groups
    (or hits its cap), the soft overlong penalty covers every episode (its buffer spans the whole
    context), overlong filtering keeps truncated episodes out of the loss, prompt_mean reduces."""
    import json

    import skyrl_gym
    from skyrl_agent.models import tiny_random_model
    from trainers.loop import train

    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    skyrl_gym.register("test-coin", "tests.envs_for_tests:CoinEnv")
    try:
        cfg = TrainConfig(
            env="test-coin", model=str(tmp_path / "model"), run_dir=str(tmp_path / "run"), steps=4,
            prompts_per_step=2, group_size=2, train_prompts=40, eval_prompts=0,
            max_tokens_per_turn=2, max_turns=1, stop=("e", "a"), max_context_tokens=512, overlong_buffer=500,
            dynamic_sampling=True, max_sampling_rounds=4, overlong_filter=True, reduction="prompt_mean",
            bf16=False, temperature=1.0, progress=False, threads=1, checkpoint_every=10,
        )  # fmt: skip
        train(cfg)
    finally:
        skyrl_gym.deregister("test-coin")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    logged = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert len(steps) == 4
    for r in steps:
        assert 1 <= r["sampling_rounds"] <= 4 and r["prompts_drawn"] >= 2
        assert r["overlong_penalized"] == r["episodes"] - r["masked"]  # every length is in the buffer
        groups = len({(t["step"], t["group_id"]) for t in logged if t["step"] == r["step"]})
        informative = groups - r["flat_groups"]
        assert informative == 2 or r["sampling_rounds"] == 4  # a full batch, or the cap was hit
        if informative == 2 and not r.get("skipped_update"):
            assert r["num_sequences"] == 4  # 2 groups of 2: the surplus of the last round dropped
    # stop strings end most turns early (1-2 tokens, one group in three or so is flat): some
    # step needed a second round, and some episode ran into the 2-token budget and was filtered
    assert any(r["sampling_rounds"] > 1 for r in steps)
    assert any(r["overlong_filtered"] > 0 for r in steps)
    assert {t["reward"] for t in logged} <= {0.0, 1.0}  # the log keeps the env's rewards
