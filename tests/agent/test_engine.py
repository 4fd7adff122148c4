import asyncio
import io
import threading
import time

import pytest

import skyrl_gym
from skyrl_agent.engine import RolloutEngine, RolloutStats, load_prompts, prompts_from_example
from skyrl_agent.io import load_jsonl, save_jsonl
from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.types import RolloutConfig, SamplingParams, StopReason
from skyrl_gym.errors import ConfigError
from tests.agent.envs import ECHO_ID, EchoEnv, echo_items, per_episode_script

pytestmark = pytest.mark.usefixtures("echo_env")


def test_groups_start_where_the_caller_says_and_seeds_do_not_move(tokenizer):
    """A batch placed after 5 groups (a rank's shard, a later sampling round) numbers its
    groups from 5 when its episodes are made; their seeds and everything played stay those of
    the same batch numbered from 0."""
    cfg = RolloutConfig(n_samples=2, concurrency=4, max_turns=3, seed=11)

    class Recording(ScriptedPolicy):
        seeds: list = []

        async def generate(self, requests):
            self.seeds += [r.sampling.seed for r in requests]
            return await super().generate(requests)

    def run(first_group):
        policy = Recording(tokenizer, per_episode_script(tokenizer, ["a", "DONE"]))
        policy.seeds = []
        trajs = RolloutEngine(policy, cfg, progress=False).run_sync(echo_items(3), first_group).trajectories
        return trajs, sorted(policy.seeds)

    (base, base_seeds), (placed, placed_seeds) = run(0), run(5)
    assert [(t.group_id, t.sample_index) for t in placed] == [(5 + g, s) for g in range(3) for s in range(2)]
    assert placed_seeds == base_seeds and len(set(base_seeds)) == 12  # 6 episodes of 2 turns
    assert [t.input_ids for t in placed] == [t.input_ids for t in base]
    assert [t.prompt_id for t in placed] == [t.prompt_id for t in base]


def test_groups_ordering_and_stats(tokenizer, tmp_path):
    policy = ScriptedPolicy(tokenizer, per_episode_script(tokenizer, ["a", "DONE"]), latency_s=0.001)
    cfg = RolloutConfig(n_samples=3, concurrency=4, max_turns=5)
    result = RolloutEngine(policy, cfg, progress=False).run_sync(echo_items(4))
    trajs = result.trajectories
    assert [(t.group_id, t.sample_index) for t in trajs] == [(g, s) for g in range(4) for s in range(3)]
    assert {t.prompt_id for t in trajs if t.group_id == 2} == {"p2"}
    stats = result.stats
    assert stats.episodes == 12 and stats.masked == 0 and stats.stop_reasons == {"env_done": 12}
    assert stats.total_turns == sum(t.num_turns for t in trajs) and stats.mean_reward == pytest.approx(
        sum(t.reward for t in trajs) / 12
    )
    assert "mean reward" in stats.table()
    assert load_jsonl(save_jsonl(trajs, tmp_path / "r.jsonl")) == trajs


def test_failures_are_counted_retried_and_masked(tokenizer):
    policy = ScriptedPolicy(tokenizer, ["a"])
    cfg = RolloutConfig(max_turns=3, max_retries=1, concurrency=8)
    items = echo_items(2) + echo_items(2, crash_on=2)
    result = RolloutEngine(policy, cfg, progress=False).run_sync(items)
    stats = result.stats
    assert stats.episodes == 4 and stats.masked == 2 and stats.env_errors == 2 and stats.retries == 2
    masked = [t for t in result.trajectories if t.masked]
    assert {t.prompt_id for t in masked} == {"p0", "p1"} and all(t.group_id >= 2 for t in masked)
    assert all("sandbox went away" in t.error for t in masked)
    assert stats.mean_reward == pytest.approx(0.3)  # only unmasked episodes: 3 turns x 0.1

    def broken_factory(item):
        raise OSError("docker daemon not reachable")

    result = RolloutEngine(policy, cfg, env_factory=broken_factory, progress=False).run_sync(echo_items(2))
    assert result.stats.masked == 2 and all("in env set-up" in t.error for t in result.trajectories)


def test_retry_recovers_from_a_transient_failure(tokenizer):
    attempts = {"n": 0}

    def flaky_factory(item):
        attempts["n"] += 1
        return EchoEnv(extras={"crash_on": 1 if attempts["n"] == 1 else -1})

    cfg = RolloutConfig(max_turns=2, max_retries=2, concurrency=1)
    result = RolloutEngine(
        ScriptedPolicy(tokenizer, ["a"]), cfg, env_factory=flaky_factory, progress=False
    ).run_sync(echo_items(1))
    assert result.stats.retries == 1 and result.stats.masked == 0
    assert result.trajectories[0].stop_reason == StopReason.MAX_TURNS


def test_env_setup_overlaps_with_generation(tokenizer):
    running = {"now": 0, "max": 0, "during_generate": 0}
    lock = threading.Lock()

    def slow_factory(item):
        with lock:
            running["now"] += 1
            running["max"] = max(running["max"], running["now"])
        time.sleep(0.05)
        with lock:
            running["now"] -= 1
        return EchoEnv()

    class Watching(ScriptedPolicy):
        async def generate(self, requests):
            running["during_generate"] = max(running["during_generate"], running["now"])
            return await super().generate(requests)

    cfg = RolloutConfig(max_turns=3, concurrency=2, env_threads=4)
    policy = Watching(tokenizer, ["a"], latency_s=0.02)
    RolloutEngine(policy, cfg, env_factory=slow_factory, progress=False).run_sync(echo_items(8))
    assert running["max"] > 1  # several envs were being built at once
    assert running["during_generate"] >= 1  # ...while the policy was generating


def test_seeded_runs_repeat_with_a_real_batched_policy(tiny_policy):
    cfg = RolloutConfig(
        n_samples=2,
        concurrency=4,
        max_turns=2,
        max_tokens_per_turn=5,
        sampling=SamplingParams(temperature=1.0),
        seed=7,
    )
    a = RolloutEngine(tiny_policy, cfg, progress=False).run_sync(echo_items(2))
    b = RolloutEngine(tiny_policy, cfg, progress=False).run_sync(echo_items(2))
    assert [t.response_ids for t in a.trajectories] == [t.response_ids for t in b.trajectories]
    # samples of one group differ (different seeds)
    assert a.trajectories[0].response_ids != a.trajectories[1].response_ids
    c = RolloutEngine(tiny_policy, RolloutConfig(**{**cfg.__dict__, "seed": 8}), progress=False).run_sync(
        echo_items(2)
    )
    assert [t.response_ids for t in c.trajectories] != [t.response_ids for t in a.trajectories]


def test_progress_line_and_step_wise_output(tokenizer):
    stream = io.StringIO()
    policy = ScriptedPolicy(tokenizer, per_episode_script(tokenizer, ["a", "b", "DONE"]), latency_s=0.01)
    cfg = RolloutConfig(step_wise=True, concurrency=2)
    result = RolloutEngine(
        policy, cfg, progress=True, progress_stream=stream, progress_every_s=0.02
    ).run_sync(echo_items(4))
    out = stream.getvalue()
    assert "[rollout]" in out and "4/4 episodes" in out and "done" in out
    assert len(result.step_samples) == 12


def test_prompts_from_jsonl_and_example(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"prompt": "hi", "env_class": "test-agent-echo", "reward_spec": {"ground_truth": 3}, "id": "a"}\n\n'
        '{"prompt": [{"role": "user", "content": "yo"}], "extras": {"max_turns": 2}}\n'
    )
    with pytest.raises(skyrl_gym.ConfigError, match="no env id"):
        load_prompts(path)
    items = load_prompts(path, env_id=ECHO_ID)
    assert items[0].prompt == ({"role": "user", "content": "hi"},) and items[0].extras["reward_spec"] == {
        "ground_truth": 3
    }
    assert items[1].extras == {"max_turns": 2} and items[1].prompt_id == "2"
    ex = prompts_from_example(ECHO_ID, 2)
    assert len(ex) == 2 and ex[0].prompt[0]["content"].startswith("Say DONE")
    assert RolloutStats.of([]).episodes == 0


def test_env_setup_timeout_is_masked_and_the_late_env_closed(tokenizer):
    closed = []

    class LateEnv(EchoEnv):
        def close(self):
            closed.append(True)

    def slow_factory(item):
        time.sleep(0.4)
        return LateEnv()

    cfg = RolloutConfig(env_setup_timeout_s=0.05, max_retries=0)

    async def main():
        result = await RolloutEngine(
            ScriptedPolicy(tokenizer, ["a"]), cfg, env_factory=slow_factory, progress=False
        ).run(echo_items(1))
        await asyncio.sleep(0.6)  # the abandoned set-up finishes; its env is closed
        return result

    result = asyncio.run(main())
    t = result.trajectories[0]
    assert t.masked and "env set-up took longer" in t.error and result.stats.timeouts == 1
    assert closed == [True]


def test_the_level_of_the_episodes_follows_the_policy_type(tokenizer):
    class Both(ScriptedPolicy):  # a Policy that can also chat still plays token-level episodes
        async def chat(self, messages, sampling):
            raise AssertionError("not called")

    result = RolloutEngine(Both(tokenizer, ["DONE"]), RolloutConfig(), progress=False).run_sync(echo_items(1))
    assert result.trajectories[0].prompt_ids and result.trajectories[0].stop_reason == StopReason.ENV_DONE

    class GenerateOnly:  # no tokenizer: neither a Policy nor a ChatModel
        async def generate(self, requests):
            return []

    with pytest.raises(ConfigError, match="neither a Policy .* nor a ChatModel"):
        RolloutEngine(GenerateOnly(), RolloutConfig(), progress=False)
