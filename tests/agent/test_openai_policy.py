import asyncio
import pickle
import random
import socket

import pytest

from skyrl_agent.loop import EpisodeInfo, run_episode
from skyrl_agent.policies.openai_compat import OpenAICompatPolicy
from skyrl_agent.policies.retry import PolicyError, PolicyHTTPError, RetryPolicy
from skyrl_agent.types import GenerateRequest, RolloutConfig, SamplingParams, StopReason
from tests.agent.envs import EchoEnv
from tests.agent.openai_server import CompletionsServer

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.05)


def _gen(policy, ids, **sp):
    async def main():
        try:
            return (await policy.generate([GenerateRequest(ids, SamplingParams(**sp))]))[0]
        finally:
            await policy.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize("style", ["field", "tokens"])
def test_token_ids_and_logprobs_round_trip_over_http(tiny_policy, tokenizer, style):
    ids = tokenizer.encode("Hello there")
    direct = tiny_policy.generate_sync([GenerateRequest(ids, SamplingParams(max_tokens=6, seed=4))])[0]
    with CompletionsServer(tiny_policy, token_ids_style=style) as server:
        remote = _gen(
            OpenAICompatPolicy(server.base_url, "tiny", tokenizer, retry=FAST), ids, max_tokens=6, seed=4
        )
        sent = server.bodies[-1]
    assert remote.token_ids == direct.token_ids
    assert remote.logprobs == pytest.approx(direct.logprobs)
    assert sent["prompt"] == ids and sent["seed"] == 4 and sent["max_tokens"] == 6


def test_without_token_ids_the_text_is_retokenized_with_a_warning(tiny_policy, tokenizer):
    ids = tokenizer.encode("Hello there")
    with CompletionsServer(tiny_policy, token_ids_style="none") as server:
        with pytest.warns(UserWarning, match="no token ids"):
            out = _gen(
                OpenAICompatPolicy(server.base_url, "tiny", tokenizer, retry=FAST), ids, max_tokens=4, seed=1
            )
    assert out.logprobs is None and out.token_ids == tokenizer.encode(out.text, add_special_tokens=False)


def test_transient_failures_are_retried_and_bad_requests_are_not(tiny_policy, tokenizer):
    ids = tokenizer.encode("Hi")
    with CompletionsServer(tiny_policy, faults=[503, 429, "drop"]) as server:
        policy = OpenAICompatPolicy(server.base_url, "tiny", tokenizer, retry=FAST)
        out = _gen(policy, ids, max_tokens=3, seed=1)
        assert len(out.token_ids) == 3 and policy.attempts == 4
    with CompletionsServer(tiny_policy, faults=[400]) as server:
        policy = OpenAICompatPolicy(server.base_url, "tiny", tokenizer, retry=FAST)
        with pytest.raises(PolicyHTTPError, match="HTTP 400") as info:
            _gen(policy, ids, max_tokens=3)
        assert policy.attempts == 1 and info.value.status == 400
        assert pickle.loads(pickle.dumps(info.value)).status == 400
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = OpenAICompatPolicy(f"http://127.0.0.1:{port}/v1", "tiny", tokenizer, retry=FAST)
    with pytest.raises(PolicyError, match="gave up after 4 attempts"):
        _gen(policy, ids, max_tokens=3)
    assert policy.attempts == 4


def test_backoff_grows_with_jitter_and_honours_retry_after():
    rp = RetryPolicy(base_delay_s=1.0, max_delay_s=5.0, jitter=0.5)
    rng = random.Random(0)
    delays = [rp.delay(a, rng) for a in range(1, 6)]
    for a, d in enumerate(delays, 1):
        cap = min(2 ** (a - 1), 5.0)
        assert cap * 0.5 <= d <= cap
    assert rp.delay(1, rng, retry_after=3.0) == 3.0 and rp.delay(1, rng, retry_after=60) == 5.0


def test_episode_through_the_server_and_a_dead_server_masks_it(tiny_policy, tokenizer):
    cfg = RolloutConfig(max_turns=2, max_tokens_per_turn=4)
    prompt = [{"role": "user", "content": "go"}]
    direct = asyncio.run(run_episode(tiny_policy, EchoEnv(), prompt, config=cfg, info=EpisodeInfo(seed=9)))
    with CompletionsServer(tiny_policy) as server:
        policy = OpenAICompatPolicy(server.base_url, "tiny", tokenizer, retry=FAST)
        remote = asyncio.run(run_episode(policy, EchoEnv(), prompt, config=cfg, info=EpisodeInfo(seed=9)))
    assert remote.input_ids == direct.input_ids and remote.rollout_logprobs == pytest.approx(
        direct.rollout_logprobs
    )
    with CompletionsServer(tiny_policy, faults=[500] * 10) as server:
        policy = OpenAICompatPolicy(server.base_url, "tiny", tokenizer, retry=FAST)
        failed = asyncio.run(run_episode(policy, EchoEnv(), prompt, config=cfg, info=EpisodeInfo(seed=9)))
    assert failed.masked and failed.stop_reason == StopReason.POLICY_ERROR and "HTTP 500" in failed.error
