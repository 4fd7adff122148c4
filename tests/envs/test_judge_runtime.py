"""Through the real agent loop: a judged episode trains on the judge's reward, and one whose judge
keeps failing comes back masked with the error (not as reward 0)."""

from __future__ import annotations

import asyncio

import pytest

import skyrl_gym
from skyrl_gym.envs.judge import load_bundled_rows
from tests._openai_stub_server import OpenAIStubServer

pytest.importorskip("transformers")

from skyrl_agent.loop import EpisodeInfo, run_episode  # noqa: E402
from skyrl_agent.policies.fake import ScriptedPolicy  # noqa: E402
from skyrl_agent.types import RolloutConfig, StopReason  # noqa: E402

ROW = load_bundled_rows("test")[0]  # "What causes thunder?"


def _episode(server, **cfg):
    from skyrl_agent.models import load_tokenizer

    config = {"judge_model": "openai/stub-judge", "api_base": server.base_url, "backoff_s": 0.01, **cfg}
    env = skyrl_gym.make("judge_qa", env_config=config, extras=ROW)
    policy = ScriptedPolicy(load_tokenizer(), ["<answer>Air heated by lightning expands suddenly.</answer>"])
    traj = asyncio.run(
        run_episode(policy, env, ROW["prompt"], config=RolloutConfig(max_turns=1), info=EpisodeInfo(seed=0))
    )
    traj.validate()
    return traj


def test_judged_episode_and_failing_judge_through_the_loop():
    with OpenAIStubServer(default_reply="VERDICT: INCORRECT") as server:
        server.reply_when("lightning", "Same cause as the reference.\nVERDICT: CORRECT")
        ok = _episode(server)
        assert ok.stop_reason == StopReason.ENV_DONE and not ok.masked and ok.reward == 1.0
        assert ok.env_metrics["judge_attempts"] == 1 and ok.env_metrics["judge_error"] is False
        server.fail_next(500, 500, 500)
        failed = _episode(server, max_retries=2)
        assert len(server.requests) == 4
    assert failed.masked and failed.stop_reason == StopReason.ENV_ERROR
    assert "JudgeError" in failed.error and "after 3 attempt" in failed.error
