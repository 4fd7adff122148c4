"""Through the real agent loop: a search episode trains on its reward, and one whose retrieval
server keeps failing comes back masked with the error (not as reward 0)."""

from __future__ import annotations

import asyncio

import pytest

import skyrl_gym
from skyrl_gym.envs.search import load_bundled_rows
from tests.envs.test_search import RetrievalServer

pytest.importorskip("transformers")

from skyrl_agent.loop import EpisodeInfo, run_episode  # noqa: E402
from skyrl_agent.policies.fake import ScriptedPolicy  # noqa: E402
from skyrl_agent.types import RolloutConfig, StopReason  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    from skyrl_agent.models import load_tokenizer

    return load_tokenizer()


ROW = next(r for r in load_bundled_rows("all") if r["question"].startswith("In which town was the inventor"))
SCRIPT = [
    "<search>inventor of the tidewheel</search>",
    "<search>Marisol Quent born</search>",
    "<answer>Harrowby</answer>",
]


def _episode(tokenizer, env_config):
    env = skyrl_gym.make("search", env_config=env_config, extras=ROW)
    traj = asyncio.run(
        run_episode(
            ScriptedPolicy(tokenizer, SCRIPT),
            env,
            ROW["prompt"],
            config=RolloutConfig(max_turns=3, max_tokens_per_turn=64),
            info=EpisodeInfo(seed=0),
        )
    )
    traj.validate()
    return traj


def test_remote_search_episode_through_the_loop(tokenizer):
    with RetrievalServer() as server:
        ok = _episode(tokenizer, {"retriever": "remote", "search_url": server.url})
        assert ok.stop_reason == StopReason.ENV_DONE and not ok.masked and ok.reward == 1.0
        assert ok.turn_rewards == [0.0, 0.0, 1.0] and len(server.requests) == 2
        assert "<information>Doc 1(Title: " in tokenizer.decode(ok.response_ids)
        server.fail_next = [503] * 10
        failed = _episode(
            tokenizer,
            {"retriever": "remote", "search_url": server.url, "max_retries": 2, "backoff_s": 0.01},
        )
    assert failed.masked and failed.stop_reason == StopReason.ENV_ERROR
    assert "RetrievalError" in failed.error and "after 3 attempt" in failed.error
