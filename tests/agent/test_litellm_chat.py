import asyncio

import pytest

import skyrl_gym
from skyrl_agent.chat_loop import run_chat_episode
from skyrl_agent.engine import PromptItem, RolloutEngine
from skyrl_agent.loop import EpisodeInfo
from skyrl_agent.policies.litellm_chat import LiteLLMChat
from skyrl_agent.policies.retry import PolicyError, PolicyHTTPError, RetryPolicy
from skyrl_agent.types import RolloutConfig, SamplingParams, StopReason
from tests.agent.envs import EchoEnv
from tests.agent.openai_server import CompletionsServer

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.05)
MSGS = [{"role": "user", "content": "Say hi"}]


def _model(server, **kw):
    return LiteLLMChat("openai/tiny", api_base=server.base_url, api_key="local-test-key", retry=FAST, **kw)


def test_chat_through_litellm_to_a_local_server_with_retries(tiny_policy):
    with CompletionsServer(tiny_policy, faults=[429, 503]) as server:
        model = _model(server)
        text = asyncio.run(model.chat(MSGS, SamplingParams(max_tokens=5, seed=1)))
        assert isinstance(text, str) and text and model.attempts == 3
        assert server.bodies[-1]["messages"] == MSGS and server.bodies[-1]["max_tokens"] == 5
    with CompletionsServer(tiny_policy, faults=[400]) as server:
        model = _model(server)
        with pytest.raises(PolicyHTTPError) as info:
            asyncio.run(model.chat(MSGS, SamplingParams(max_tokens=5)))
        assert info.value.status == 400 and model.attempts == 1  # a bad request is not retried
    with CompletionsServer(tiny_policy, faults=[500] * 8) as server:
        model = _model(server)
        with pytest.raises(PolicyError, match="gave up after 4 attempts"):
            asyncio.run(model.chat(MSGS, SamplingParams(max_tokens=5)))
        assert model.attempts == 4


def test_chat_level_episodes_and_engine(tiny_policy):
    cfg = RolloutConfig(max_turns=2, max_tokens_per_turn=4, n_samples=2, concurrency=2)
    with CompletionsServer(tiny_policy) as server:
        traj = asyncio.run(
            run_chat_episode(_model(server), EchoEnv(), MSGS, config=cfg, info=EpisodeInfo(seed=1))
        )
        assert traj.num_turns == 2 and traj.stop_reason == StopReason.MAX_TURNS and not traj.masked
        assert traj.prompt_ids == [] and traj.rollout_logprobs is None and traj.turn_rewards == [0.1, 0.1]
        assert [m["role"] for m in traj.messages] == ["user", "assistant", "user", "assistant"]
        skyrl_gym.register("chat-echo", "tests.agent.envs:EchoEnv")
        try:
            items = [PromptItem("chat-echo", tuple(MSGS), {}, {}, "p0")]
            result = RolloutEngine(_model(server), cfg, progress=False).run_sync(items)
        finally:
            skyrl_gym.deregister("chat-echo")
        assert result.stats.episodes == 2 and result.stats.masked == 0 and result.stats.total_turns == 4
    with CompletionsServer(tiny_policy, faults=[500] * 8) as server:
        failed = asyncio.run(run_chat_episode(_model(server), EchoEnv(), MSGS, config=cfg))
    assert failed.masked and failed.stop_reason == StopReason.POLICY_ERROR and "gave up" in failed.error
