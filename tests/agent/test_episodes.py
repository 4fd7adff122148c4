"""Episodes read as turns (issue 47): each turn's observation, sampled ids, logprobs and env
record, the outcome, and a prompt's group, from what the runtime recorded and from old files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from skyrl_agent import Episode, RolloutEngine, group_episodes
from skyrl_agent.context import training_samples
from skyrl_agent.failures import FailureStage
from skyrl_agent.io import load_jsonl
from skyrl_agent.loop import EpisodeInfo, run_episode
from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.types import RolloutConfig, StopReason
from tests.agent.envs import EchoEnv, echo_items, per_episode_script

pytestmark = pytest.mark.usefixtures("echo_env")

OLD_FILE = Path(__file__).parent / "data" / "trajectories-2026-12-05.jsonl"


def test_a_batch_reads_as_groups_of_episodes_of_turns(tokenizer):
    policy = ScriptedPolicy(tokenizer, per_episode_script(tokenizer, ["a", "b", "DONE"]))
    result = RolloutEngine(policy, RolloutConfig(n_samples=2, concurrency=4), progress=False).run_sync(
        echo_items(3), first_group=4
    )
    groups = result.groups
    assert [(g.group_id, g.prompt_id) for g in groups] == [(4, "p0"), (5, "p1"), (6, "p2")]
    assert [[e.sample_index for e in g.episodes] for g in groups] == [[0, 1]] * 3
    assert [e.trajectory for g in groups for e in g.episodes] == result.trajectories
    assert groups[0].rewards == pytest.approx([1.2, 1.2])  # 0.1 + 0.1 + 1.0
    for ep in result.episodes:
        traj = ep.trajectory
        assert ep.prompt_ids == traj.prompt_ids and ep.stretches == 1
        assert [t.index for t in ep.turns] == [0, 1, 2]
        assert [tokenizer.decode(t.sampled_ids).strip() for t in ep.turns] == [
            "a<|im_end|>",
            "b<|im_end|>",
            "DONE<|im_end|>",
        ]
        # the first turn read the prompt; the later ones the env's reply, in the template
        assert ep.turns[0].observation_ids == traj.prompt_ids
        assert "ok 1" in tokenizer.decode(ep.turns[1].observation_ids)
        assert "ok 2" in tokenizer.decode(ep.turns[2].observation_ids)
        # observations and sampled ids, in order, spell the whole sequence
        spelled = [i for t in ep.turns for i in t.observation_ids + t.sampled_ids]
        assert spelled == traj.input_ids
        for t in ep.turns:
            start, end = t.span
            assert t.logprobs == traj.rollout_logprobs[start:end] and len(t.logprobs) == len(t.sampled_ids)
            assert t.record is traj.turns[t.index] and t.reward == t.record.reward
        assert [t.done for t in ep.turns] == [False, False, True]
        assert ep.outcome.stop_reason == StopReason.ENV_DONE and ep.outcome.reward == pytest.approx(1.2)
        assert ep.outcome.metrics == traj.env_metrics == {"turns": 3, "done_said": True}
        assert not ep.outcome.masked and ep.outcome.failure is None


def test_a_turn_the_env_failed_on_has_no_reward_and_the_failure_is_the_outcome(tokenizer):
    traj = asyncio.run(
        run_episode(
            ScriptedPolicy(tokenizer, ["a"]),
            EchoEnv(extras={"crash_on": 2}),
            [{"role": "user", "content": "go"}],
            config=RolloutConfig(max_turns=5),
            info=EpisodeInfo(seed=1),
        )
    )
    ep = Episode.of(traj)
    assert len(ep.turns) == 2 and len(ep.answered_turns) == 1
    assert ep.turns[1].sampled_ids and ep.turns[1].reward is None and ep.turns[1].record is None
    assert ep.outcome.masked and ep.outcome.stop_reason == StopReason.ENV_ERROR
    assert ep.outcome.failure.stage == FailureStage.ENV and "sandbox went away" in ep.outcome.error


def test_after_a_context_rewrite_each_stretch_starts_from_what_the_policy_saw(tokenizer):
    policy = ScriptedPolicy(tokenizer, ["looking"])
    config = RolloutConfig(
        max_turns=8,
        max_tokens_per_turn=16,
        max_context_tokens=320,
        context_strategy="drop_observations",
        keep_observations=1,
    )
    traj = asyncio.run(
        run_episode(
            policy,
            EchoEnv(extras={"obs_text": "log {n}: " + "x " * 60}),
            [{"role": "user", "content": "Read the logs."}],
            config=config,
            info=EpisodeInfo(seed=1),
        )
    )
    ep = Episode.of(traj)
    assert traj.context_rewrites >= 1 and ep.stretches == traj.context_rewrites + 1
    assert len(ep.turns) == 8 and [t.index for t in ep.turns] == list(range(8))
    assert ep.prompt_ids == traj.segments[0].prompt_ids != traj.prompt_ids
    # what the policy was sent for each turn: its stretch's prompt and the stretch so far
    for turn, request in zip(ep.turns, policy.requests, strict=True):
        same = [t for t in ep.turns[: turn.index] if t.stretch == turn.stretch]
        seen = [i for t in same for i in t.observation_ids + t.sampled_ids] + turn.observation_ids
        assert seen == list(request.prompt_ids)
    firsts = [t for t in ep.turns if t.index == 0 or ep.turns[t.index - 1].stretch != t.stretch]
    assert [t.stretch for t in firsts] == list(range(ep.stretches))


def test_a_file_from_before_turn_records_reads_as_episodes():
    trajs = load_jsonl(OLD_FILE)
    groups = group_episodes(trajs)
    assert sum(len(g.episodes) for g in groups) == len(trajs) and len(groups) >= 2
    ep = groups[0].episodes[0]
    traj = ep.trajectory
    assert traj.turns == []  # written before turns were recorded
    assert [t.record for t in ep.turns] == [None, None]
    assert [t.reward for t in ep.turns] == [0.1, 1.0] == traj.turn_rewards
    assert ep.turns[1].observation_ids == traj.response_ids[2:15]  # between the spans [0, 2) and [15, 18)
    assert ep.turns[1].sampled_ids == traj.response_ids[15:18]


def test_chat_level_turns_have_records_and_no_ids(tokenizer):
    class Chat:
        async def chat(self, messages, sampling):
            return "DONE" if len(messages) > 2 else "a"

    result = RolloutEngine(Chat(), RolloutConfig(), progress=False).run_sync(echo_items(1))
    (ep,) = result.episodes
    assert [t.span for t in ep.turns] == [None, None]
    assert [t.reward for t in ep.turns] == [0.1, 1.0] and all(t.record is not None for t in ep.turns)
    assert all(t.sampled_ids == [] and t.observation_ids == [] for t in ep.turns)


def test_step_samples_are_cut_on_read_and_only_when_asked(tokenizer):
    policy = ScriptedPolicy(tokenizer, per_episode_script(tokenizer, ["a", "DONE"]))
    cut = RolloutEngine(policy, RolloutConfig(step_wise=True), progress=False).run_sync(echo_items(2))
    assert cut.step_samples == [s for t in cut.trajectories for s in training_samples(t, step_wise=True)]
    assert len(cut.step_samples) == 4
    whole = RolloutEngine(policy, RolloutConfig(), progress=False).run_sync(echo_items(2))
    assert whole.step_samples == []
