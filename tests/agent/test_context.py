"""Context budgets for long episodes: dropping old observations, a summariser hook, and the
samples the trainer gets from an episode whose history was rewritten."""

from __future__ import annotations

import asyncio

import pytest

from skyrl_agent.context import OMITTED, drop_old_observations, training_samples
from skyrl_agent.io import load_jsonl, load_parquet, save_jsonl, save_parquet
from skyrl_agent.loop import EpisodeInfo, run_episode
from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.types import RolloutConfig, StopReason
from skyrl_gym.errors import ConfigError
from tests.agent.envs import EchoEnv

PROMPT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Read the logs."}]
LONG = "log {n}: " + "lorem ipsum dolor sit amet " * 12  # about 70 tokens an observation


def test_drop_old_observations_by_hand():
    msgs = [
        *PROMPT,
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "o1"},
        {"role": "assistant", "content": "a2"},
        {"role": "tool", "content": "o2"},
        {"role": "assistant", "content": "a3"},
        {"role": "user", "content": "o3"},
    ]
    out = drop_old_observations(msgs, n_prompt=2, keep=1)
    assert [m["content"] for m in out] == [
        "Be brief.",
        "Read the logs.",
        "a1",
        OMITTED,
        "a2",
        OMITTED,
        "a3",
        "o3",
    ]
    assert [m["role"] for m in out] == [m["role"] for m in msgs]  # tool calls and results still pair
    assert msgs[3]["content"] == "o1"  # the input is left alone
    assert drop_old_observations(out, 2, 1) is None  # nothing more to drop
    assert drop_old_observations(msgs, 2, 3) is None


def run(tokenizer, env, **cfg):
    policy = ScriptedPolicy(tokenizer, ["looking"])
    config = RolloutConfig(max_turns=8, max_tokens_per_turn=16, max_context_tokens=320, **cfg)
    traj = asyncio.run(run_episode(policy, env, PROMPT, config=config, info=EpisodeInfo(seed=1)))
    traj.validate()
    return traj, policy


def test_without_a_strategy_the_context_limit_ends_the_episode(tokenizer):
    traj, _ = run(tokenizer, EchoEnv(extras={"obs_text": LONG}))
    assert traj.stop_reason == StopReason.CONTEXT_LIMIT and traj.num_turns < 8
    assert traj.segments == [] and traj.context_rewrites == 0 and traj.context_strategy == "stop"


def test_dropping_observations_lets_the_episode_go_on(tokenizer):
    traj, policy = run(
        tokenizer,
        EchoEnv(extras={"obs_text": LONG}),
        context_strategy="drop_observations",
        keep_observations=1,
    )
    assert traj.stop_reason == StopReason.MAX_TURNS and traj.num_turns == 8
    assert traj.context_rewrites == len(traj.segments) >= 1 and traj.context_strategy == "drop_observations"
    # every request fits, and turn t's request is exactly what its stretch recorded
    assert all(len(r.prompt_ids) + 16 <= 320 for r in policy.requests)
    stretches = [*traj.segments, traj]
    assert sum(len(s.turn_spans) for s in stretches) == 8 and len(traj.turn_rewards) == 8
    after = tokenizer.decode(traj.prompt_ids)
    assert OMITTED in after and "log 1:" not in after  # the oldest are gone, the newest is kept
    assert f"log {8 - len(traj.turn_spans)}:" in after
    # the trainer's samples: one per stretch (or per turn), each with the context the model saw
    samples = training_samples(traj)
    assert [s.prompt_ids for s in samples] == [s.prompt_ids for s in stretches]
    assert all(s.reward == traj.reward for s in samples)
    assert sum(sum(s.turn_rewards) for s in samples) == pytest.approx(traj.reward)
    steps = training_samples(traj, step_wise=True)
    assert len(steps) == 8 and all(s.num_turns == 1 and all(s.loss_mask) for s in steps)
    seen = [list(r.prompt_ids) for r in policy.requests]
    assert [s.prompt_ids for s in steps] == seen  # each step's prompt is the request of its turn


class SummaryEnv(EchoEnv):
    """Keeps the first prompt and one summary line of what came since."""

    def summarize_history(self, messages):
        said = sum(m["role"] == "assistant" for m in messages)
        return [*messages[:2], {"role": "user", "content": f"Summary: {said} turns so far, nothing found."}]


def test_a_summariser_hook_rewrites_the_history(tokenizer, tmp_path):
    traj, _ = run(tokenizer, SummaryEnv(extras={"obs_text": LONG}), context_strategy="summarize")
    assert traj.stop_reason == StopReason.MAX_TURNS and traj.context_rewrites >= 1
    assert "Summary:" in tokenizer.decode(traj.prompt_ids) and "lorem" not in tokenizer.decode(
        traj.prompt_ids
    )
    # rewritten episodes survive the trajectory files
    for save, load, name in ((save_jsonl, load_jsonl, "t.jsonl"), (save_parquet, load_parquet, "t.parquet")):
        (back,) = load(save([traj], tmp_path / name))
        assert back == traj


def test_summariser_mistakes(tokenizer):
    with pytest.raises(ConfigError, match="summarize_history"):
        run(tokenizer, EchoEnv(extras={"obs_text": LONG}), context_strategy="summarize")

    class Broken(EchoEnv):
        def summarize_history(self, messages):
            return "not a list"

    traj, _ = run(tokenizer, Broken(extras={"obs_text": LONG}), context_strategy="summarize")
    assert traj.masked and traj.stop_reason == StopReason.ENV_ERROR and "list of messages" in traj.error
    with pytest.raises(ConfigError, match="observation_style"):
        RolloutConfig(context_strategy="drop_observations", observation_style="inline")
    with pytest.raises(ConfigError, match="newest observation"):
        RolloutConfig(context_strategy="drop_observations", keep_observations=0)
