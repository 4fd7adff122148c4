"""Step-wise training on an agent whose history is not append-only (it drops old observations)."""

from __future__ import annotations

import json

import pytest
import torch

from skyrl_gym.errors import ConfigError
from trainers.advantages import episode_advantages
from trainers.config import TrainConfig


def test_episode_advantages_count_each_episode_once():
    # two groups of two episodes; GRPO on the episode rewards, whatever their sample counts
    adv = episode_advantages("grpo", torch.tensor([1.0, 0.0, 0.5, 0.5]), torch.tensor([0, 0, 1, 1]))
    assert adv[0] > 0 > adv[1] and adv[0] == pytest.approx(-adv[1]) and adv[2:].abs().max() < 1e-6
    rloo = episode_advantages("rloo", torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 0]))
    assert rloo.tolist() == pytest.approx([1.0, -0.5, -0.5])  # each minus the mean of the others
    with pytest.raises(ConfigError, match="outcome estimator"):
        episode_advantages("gae", torch.tensor([1.0]), torch.tensor([0]))
    with pytest.raises(ConfigError, match="gae"):
        TrainConfig(step_wise=True, advantage="gae")
    with pytest.raises(ConfigError, match="newest observation"):
        TrainConfig(context_strategy="drop_observations", keep_observations=0)
    with pytest.raises(ConfigError, match="observation_style"):
        TrainConfig(context_strategy="summarize", observation_style="inline")


@pytest.mark.slow
def test_step_wise_training_of_an_agent_that_drops_old_observations(tmp_path):
    import skyrl_gym
    from skyrl_agent.models import tiny_random_model
    from trainers.loop import train

    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    skyrl_gym.register("test-logs", "tests.envs_for_tests:LogsEnv")
    try:
        cfg = TrainConfig(
            env="test-logs", model=str(tmp_path / "model"), run_dir=str(tmp_path / "run"), steps=2,
            prompts_per_step=2, group_size=4, train_prompts=20, eval_prompts=0, max_turns=4,
            max_tokens_per_turn=6, stop=(), max_context_tokens=260, context_strategy="drop_observations",
            keep_observations=1, step_wise=True, skip_equal_reward_groups=False, bf16=False,
            temperature=1.0, progress=False, threads=1, checkpoint_every=10,
        )  # fmt: skip
        train(cfg)
    finally:
        skyrl_gym.deregister("test-logs")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    logged = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    # the small context made every episode drop observations, and none stopped on the limit
    assert all(t["context_rewrites"] >= 1 and t["stop_reason"] == "env_done" for t in logged)
    assert all(t["num_turns"] == 4 for t in logged)
    for r in steps:
        assert r["samples_per_episode"] == 4  # one sample per turn
        assert r["num_sequences"] == 4 * 8 and r["context_rewrites_mean"] >= 1
        assert "policy_loss" in r
