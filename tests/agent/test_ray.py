"""The rollout engine over Ray workers (one two-CPU node on 127.0.0.1) gives the same
trajectories as the local engine."""

import functools
import time

import pytest

import skyrl_gym
from skyrl_agent.engine import PromptItem, RolloutEngine
from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.types import RolloutConfig, StopReason
from tests.agent.envs import per_episode_script

pytestmark = pytest.mark.slow  # a local Ray cluster starts in about 6 s, the tests take about 20 s

ray = pytest.importorskip("ray", reason="the `ray` extra is not installed: pip install -e '.[ray]'")

ENV_ID = "test-agent-ray-echo"


def scripted_policy(replies, latency_s=0.0):
    """Builds the same scripted policy in any process (a picklable policy factory)."""
    from skyrl_agent.models import load_tokenizer

    tok = load_tokenizer()
    return ScriptedPolicy(tok, per_episode_script(tok, replies), latency_s=latency_s)


def server_client(url):
    """A client of the OpenAI-compatible server at ``url`` (a picklable policy factory)."""
    from skyrl_agent.models import load_tokenizer
    from skyrl_agent.policies.openai_compat import OpenAICompatPolicy

    return OpenAICompatPolicy(url, "tiny", load_tokenizer(), timeout_s=60)


def crashing_policy():
    import os

    os._exit(1)  # the worker process dies while building its policy


@pytest.fixture(scope="module")
def ray_cluster():
    from tests.ray_cluster import loopback_cluster

    if ray.is_initialized():
        yield ray  # a cluster this process already joined
        return
    with loopback_cluster(nodes=1, cpus_per_node=2):
        yield ray


@pytest.fixture(autouse=True)
def _registered():
    skyrl_gym.register(ENV_ID, "tests.agent.envs:EchoEnv")
    yield
    skyrl_gym.deregister(ENV_ID)


def _key(t):
    """Everything an episode produced except timings."""
    return (
        t.group_id,
        t.sample_index,
        t.prompt_id,
        t.prompt_ids,
        t.response_ids,
        t.loss_mask,
        t.rollout_logprobs,
        t.token_rewards,
        t.reward,
        t.stop_reason,
        t.messages,
        t.env_metrics,
    )


def _items(n, **extras):
    return [
        PromptItem(ENV_ID, ({"role": "user", "content": f"task {i}"},), {}, extras, f"p{i}") for i in range(n)
    ]


def test_ray_workers_give_the_local_trajectories(ray_cluster, tokenizer):
    from skyrl_agent.ray_engine import RayConfig, RayRolloutEngine

    replies = ["a", "b", "DONE"]
    cfg = RolloutConfig(n_samples=2, concurrency=4, max_turns=5, seed=3)
    items = _items(5)
    local = RolloutEngine(scripted_policy(replies), cfg, progress=False).run_sync(items)
    factory = functools.partial(scripted_policy, replies, 0.001)
    t0 = time.perf_counter()
    with RayRolloutEngine(factory, cfg, RayConfig(num_workers=2, num_cpus_per_worker=1)) as engine:
        remote = engine.run_sync(items)
        again = engine.run_sync(items[:2])  # the workers are reused
        alive = ray_cluster.get([a.run.remote([]) for a in engine._actors])
    print(f"ray run: {time.perf_counter() - t0:.1f}s")
    assert [(r.trajectories, r.retries) for r in alive] == [([], 0), ([], 0)]  # two workers
    assert [_key(t) for t in remote.trajectories] == [_key(t) for t in local.trajectories]
    assert (
        remote.stats.episodes == 10
        and remote.stats.masked == 0
        and remote.stats.stop_reasons == {"env_done": 10}
    )
    assert [_key(t) for t in again.trajectories] == [_key(t) for t in local.trajectories[:4]]


def test_a_lost_worker_masks_its_episodes(ray_cluster):
    from skyrl_agent.ray_engine import RayConfig, RayRolloutEngine

    with RayRolloutEngine(crashing_policy, RolloutConfig(), RayConfig(num_workers=1)) as engine:
        result = engine.run_sync(_items(2))
    assert result.stats.masked == 2
    assert all(
        t.stop_reason == StopReason.ENV_ERROR and "Ray worker lost" in t.error for t in result.trajectories
    )


def test_ray_workers_share_a_remote_policy_through_the_server(ray_cluster, tiny):
    """The workers sample from one model behind the OpenAI-compatible server on 127.0.0.1 and
    produce the same token ids and logprobs as a local engine talking to that server."""
    from skyrl_agent.policies.hf import EngineConfig, HFPolicy
    from skyrl_agent.ray_engine import RayConfig, RayRolloutEngine
    from skyrl_agent.server import ServerConfig, ServerThread
    from skyrl_agent.types import SamplingParams

    model, tok = tiny
    # one request per model call and no KV reuse: a row's numbers depend neither on what it was
    # batched with nor on which earlier pass computed its prefix (the last float bits can differ)
    policy = HFPolicy(
        model, tok, seed=0, max_batch_size=1, engine=EngineConfig(max_rows=1, prefix_cache_bytes=0)
    )
    cfg = RolloutConfig(
        n_samples=2,
        concurrency=4,
        max_turns=2,
        max_tokens_per_turn=6,
        sampling=SamplingParams(temperature=1.0),
    )
    items = _items(3)
    try:
        with ServerThread(policy, ServerConfig(model_name="tiny", max_model_len=1024)) as server:
            local = RolloutEngine(server_client(server.url), cfg, progress=False).run_sync(items)
            factory = functools.partial(server_client, server.url)
            with RayRolloutEngine(factory, cfg, RayConfig(num_workers=2)) as engine:
                remote = engine.run_sync(items)
            calls = sum(server.store.ids().values())
    finally:
        policy.close()
    assert remote.stats.masked == 0 and local.stats.masked == 0
    assert [_key(t) for t in remote.trajectories] == [_key(t) for t in local.trajectories]
    assert all(t.rollout_logprobs is not None and t.num_turns >= 1 for t in remote.trajectories)
    turns = sum(t.num_turns for t in local.trajectories) + sum(t.num_turns for t in remote.trajectories)
    assert calls == turns  # every turn of both runs was a call to the one server


def test_skyrl_rollout_on_ray_workers(ray_cluster, tmp_path, capsys):
    import argparse

    from skyrl_agent.cli import add_rollout_command
    from skyrl_agent.io import load_jsonl

    parser = argparse.ArgumentParser(prog="skyrl")
    add_rollout_command(parser.add_subparsers(dest="command"))
    out = tmp_path / "ray.jsonl"
    argv = ["rollout", "--env", ENV_ID, "--model", "tiny-random", "--num-prompts", "3", "--n", "2"]
    argv += ["--max-turns", "2", "--max-tokens", "4", "--ray-workers", "2", "--threads", "1", "--quiet"]
    args = parser.parse_args([*argv, "--out", str(out)])
    assert args.handler(args) == 0
    trajs = load_jsonl(out)
    assert len(trajs) == 6 and not any(t.masked for t in trajs)
    assert [(t.group_id, t.sample_index) for t in trajs] == [(g, s) for g in range(3) for s in range(2)]
    assert all(t.rollout_logprobs is not None and t.num_turns >= 1 for t in trajs)
    assert "episodes" in capsys.readouterr().out
