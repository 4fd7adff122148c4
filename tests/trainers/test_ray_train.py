"""Training with its rollouts on Ray workers (``skyrl train --ray-address``), on a simulated
cluster of three one-CPU nodes on 127.0.0.1: versioned weights reach the workers, a killed
worker and a removed node are survived with every episode played exactly once, and a worker
group the cluster cannot hold fails at once with what is missing. Trainer ranks as Ray actors
(``--ray-trainer-ranks``): two ranks train with two workers, a killed rank stops the run naming
its checkpoint and ``--resume`` finishes it."""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
import time

import pytest
import torch

import skyrl_gym
from skyrl_agent.types import RolloutConfig
from skyrl_gym.errors import ConfigError
from tests.agent.envs import echo_items
from tests.ray_cluster import loopback_cluster

pytestmark = pytest.mark.slow  # the cluster starts in about 6 s; the module takes about a minute

ray = pytest.importorskip("ray", reason="the `ray` extra is not installed: pip install -e '.[ray]'")

ECHO = "test-agent-echo"


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        pytest.skip("another Ray instance is connected in this process")
    with loopback_cluster(nodes=3, cpus_per_node=1) as c:
        yield c


@pytest.fixture(autouse=True)
def _echo_env():
    skyrl_gym.register(ECHO, "tests.agent.envs:EchoEnv")
    yield
    skyrl_gym.deregister(ECHO)


def _engine(tiny_model_dir, config, **ray_kw):
    from skyrl_agent.ray_engine import RayConfig, RayRolloutEngine
    from trainers.ray_sampler import worker_sampler

    factory = functools.partial(worker_sampler, str(tiny_model_dir), 1, {"max_batch_size": 16, "seed": 0})
    return RayRolloutEngine(factory, config, RayConfig(num_workers=2, **ray_kw))


def _pids(engine):
    return [ray.get(a.__ray_call__.remote(lambda self: os.getpid()), timeout=60) for a in engine._actors]


def _nodes(engine):
    return [
        ray.get(a.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()), timeout=60)
        for a in engine._actors
    ]


def test_skyrl_train_on_a_three_node_cluster(cluster, tiny_model_dir, tmp_path, capsys):
    """Two steps of the calculator through the command line, rollouts and evaluations on two
    workers: every episode records the weights it was sampled with (the trainer's steps
    finished), and the workers loaded each new version once."""
    from trainers.cli import main

    run_dir = tmp_path / "run"
    argv = [
        "--env", "calculator", "--model", str(tiny_model_dir), "--run-dir", str(run_dir), "--steps", "2",
        "--prompts-per-step", "2", "--group-size", "2", "--train-prompts", "20", "--eval-prompts", "2",
        "--eval-samples", "1", "--max-tokens-per-turn", "6", "--no-bf16", "--no-skip-equal-reward-groups",
        "--temperature", "1.0", "--threads", "1", "--report-to", "none",
        "--ray-address", cluster.address, "--ray-workers", "2",
    ]  # fmt: skip
    assert main(argv) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in steps] == [1, 2]
    # version 0 before the first update, version 1 after it; each of the two workers loads each
    assert [r["ray_weight_syncs"] for r in steps] == [2, 4]
    assert all(r["ray_sync_bytes"] > 1_000_000 and r["episode_staleness_max"] == 0 for r in steps)
    assert all(r["ray_workers_restarted"] == 0 and r["ray_episodes_lost"] == 0 for r in steps)
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 8 and all(t["policy_version"] == t["step"] - 1 for t in trajs)
    assert json.loads((run_dir / "config.json").read_text())["run"]["ray_address"] == cluster.address


def test_asynchronous_training_on_ray_workers_keeps_the_staleness_bound(cluster, tiny_model_dir, tmp_path):
    """--async-staleness 1: the next batch is played while the trainer trains, and evaluations
    share the workers from the main thread; every episode is at most one update behind."""
    from trainers.config import TrainConfig
    from trainers.loop import train

    cfg = TrainConfig(
        model=str(tiny_model_dir), run_dir=str(tmp_path / "run"), steps=3, prompts_per_step=2, group_size=2,
        train_prompts=20, eval_prompts=2, eval_samples=1, eval_every=2, max_tokens_per_turn=6, bf16=False,
        skip_equal_reward_groups=False, temperature=1.0, progress=False, threads=1, report_to=("none",),
        async_staleness=1, ray_address=cluster.address, ray_workers=2,
    )  # fmt: skip
    result = train(cfg)
    assert result.final is not None and result.final.masked == 0
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if r["kind"] == "train"]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert all(0 <= r["episode_staleness_max"] <= 1 for r in steps)
    trajs = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert all(t["step"] - 2 <= t["policy_version"] <= t["step"] - 1 for t in trajs)


def test_synced_weights_sample_what_the_trainer_scores(cluster, tiny_model_dir):
    """After a sync the workers' logprobs are the trainer's own for the new weights (and not for
    the starting ones: the check can fail)."""
    from skyrl_agent.models import load_model_and_tokenizer
    from trainers.logprobs import token_logprobs

    start, _ = load_model_and_tokenizer(str(tiny_model_dir))
    trained, _ = load_model_and_tokenizer(str(tiny_model_dir))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    config = RolloutConfig(max_turns=2, max_tokens_per_turn=8, n_samples=2, concurrency=4, seed=1)
    with _engine(tiny_model_dir, config) as engine:
        assert engine.update_weights(trained.state_dict(), version=7) == 7
        result = engine.run_sync(echo_items(3))
        synced = engine.counts.weight_syncs
        engine.relabel(8)  # a step that did not update: same weights, the next version
        again = engine.run_sync(echo_items(3))
    assert [t.policy_version for t in result.trajectories] == [7] * 6
    assert [t.policy_version for t in again.trajectories] == [8] * 6
    assert synced == 2 and engine.counts.weight_syncs == 2  # each worker loaded once, not again
    worst_new = worst_old = 0.0
    for t in result.trajectories:
        ids = torch.tensor([t.input_ids])
        mask = torch.tensor([[0] * len(t.prompt_ids) + t.loss_mask]).bool()
        sampled = torch.tensor([[0.0] * len(t.prompt_ids) + t.rollout_logprobs])
        with torch.no_grad():
            new = token_logprobs(trained.eval(), ids, torch.ones_like(ids))[0]
            old = token_logprobs(start.eval(), ids, torch.ones_like(ids))[0]
        worst_new = max(worst_new, float((new - sampled)[mask].abs().max()))
        worst_old = max(worst_old, float((old - sampled)[mask].abs().max()))
    assert worst_new < 1e-3, worst_new
    assert worst_old > 1e-2, worst_old


def _kill_mid_shard(engine, items, kill):
    """Run ``items`` in a thread; once both workers are playing, ``kill()``; the result."""
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", engine.run_sync(items)))
    thread.start()
    time.sleep(1.0)  # the shards are under way (each takes about 2 s: its episodes sleep in env.step)
    kill()
    thread.join(timeout=180)
    assert not thread.is_alive(), "the run did not finish after the worker was lost"
    return box["result"]


def test_a_killed_worker_is_restarted_and_its_episodes_played_once_more(cluster, tiny_model_dir):
    config = RolloutConfig(max_turns=3, max_tokens_per_turn=4, n_samples=2, concurrency=4, seed=2)
    items = echo_items(4, sleep_s=0.3)
    with _engine(tiny_model_dir, config, max_restarts=2) as engine:
        engine.update_weights({}, version=3)  # an empty state: a version without tensors
        engine.run_sync(items[:1])  # the workers are up
        victim = _pids(engine)[1]
        result = _kill_mid_shard(engine, items, lambda: os.kill(victim, signal.SIGKILL))
        counts = engine.counts
        assert _pids(engine)[1] != victim  # restarted, same handle
    keys = [(t.group_id, t.sample_index) for t in result.trajectories]
    assert keys == [(g, s) for g in range(4) for s in range(2)]  # none lost, none twice
    assert not any(t.masked for t in result.trajectories)
    assert all(t.policy_version == 3 for t in result.trajectories)  # the restarted worker caught up
    assert counts.workers_restarted == 1 and counts.episodes_lost == 0
    assert counts.episodes_replayed == 4  # worker 1's shard: groups 1 and 3, two samples each


def test_a_removed_node_is_survived(cluster, tiny_model_dir):
    config = RolloutConfig(max_turns=3, max_tokens_per_turn=4, n_samples=2, concurrency=4, seed=2)
    items = echo_items(4, sleep_s=0.3)
    with _engine(tiny_model_dir, config, max_restarts=2, placement_strategy="SPREAD") as engine:
        engine.run_sync(items[:1])
        nodes = _nodes(engine)
        victim = next(n for n in cluster.worker_nodes if n.node_id == nodes[1])
        result = _kill_mid_shard(engine, items, lambda: cluster.remove_node(victim))
        counts = engine.counts
        moved = _nodes(engine)
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")  # back to three nodes
    cluster.wait_for_nodes()
    assert moved[1] != nodes[1] and moved[0] == nodes[0]
    assert [(t.group_id, t.sample_index) for t in result.trajectories] == [
        (g, s) for g in range(4) for s in range(2)
    ]
    assert not any(t.masked for t in result.trajectories)
    assert counts.workers_restarted == 1 and counts.episodes_replayed == 4


def test_without_restarts_a_lost_workers_episodes_are_masked(cluster, tiny_model_dir):
    config = RolloutConfig(max_turns=3, max_tokens_per_turn=4, n_samples=2, concurrency=4, seed=2)
    items = echo_items(4, sleep_s=0.3)
    with _engine(tiny_model_dir, config, max_restarts=0) as engine:
        engine.run_sync(items[:1])
        victim = _pids(engine)[0]
        result = _kill_mid_shard(engine, items, lambda: os.kill(victim, signal.SIGKILL))
        assert engine.counts.episodes_lost == 4
    masked = [(t.group_id, t.sample_index) for t in result.trajectories if t.masked]
    assert masked == [(0, 0), (0, 1), (2, 0), (2, 1)]
    assert all("Ray worker lost" in t.error and t.failure.retriable for t in result.trajectories if t.masked)


def test_a_group_the_cluster_cannot_hold_fails_at_once_naming_what_is_missing(cluster, tiny_model_dir):
    config = RolloutConfig(max_turns=1, n_samples=1)
    engine = _engine(tiny_model_dir, config, num_cpus_per_worker=4, placement_timeout_s=2)
    start = time.monotonic()
    with pytest.raises(
        ConfigError, match=r"8 CPU in all \(the cluster has 3; its largest node 1\).*--ray-workers"
    ):
        engine.run_sync(echo_items(1))
    assert time.monotonic() - start < 30
    assert engine._group is None and not engine._actors
    assert ray.util.placement_group_table() == {} or all(
        pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values()
    )


def test_ray_settings_are_checked_and_torchrun_is_refused():
    from trainers.config import TrainConfig

    with pytest.raises(ConfigError, match="ray_workers must be >= 1"):
        TrainConfig(ray_address="auto", ray_workers=0)
    with pytest.raises(ConfigError, match="ray_address is empty"):
        TrainConfig(ray_address=" ")
    from trainers.distributed import DistContext
    from trainers.loop import _supported_at_scale

    dist = DistContext(rank=0, world_size=2, backend="gloo")
    with pytest.raises(ConfigError, match="without torchrun, with --ray-trainer-ranks N"):
        _supported_at_scale(TrainConfig(ray_address="auto"), dist)
    with pytest.raises(ConfigError, match="ray_trainer_ranks needs a Ray cluster: give --ray-address"):
        TrainConfig(ray_trainer_ranks=2)
    with pytest.raises(ConfigError, match="does not run with several trainer ranks yet"):
        TrainConfig(ray_address="auto", ray_trainer_ranks=2, async_staleness=1)
    with pytest.raises(ConfigError, match="ray_cpus_per_rank must be >= 0"):
        TrainConfig(ray_address="auto", ray_trainer_ranks=2, ray_cpus_per_rank=-1)


def test_trainer_ranks_refuse_torchrun(monkeypatch):
    from trainers.config import TrainConfig
    from trainers.loop import train
    from trainers.ray_ranks import RayTrainerRanks

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="starts the trainer ranks itself: launch it without torchrun"):
        RayTrainerRanks(TrainConfig(ray_address="auto", ray_trainer_ranks=2), train)


def test_ranks_the_cluster_cannot_hold_fail_at_once_and_a_ranks_error_is_raised_as_itself(
    cluster, tiny_model_dir, tmp_path, monkeypatch
):
    from skyrl_gym.errors import EnvNotFoundError
    from trainers import ray_ranks
    from trainers.loop import train

    monkeypatch.setattr(ray_ranks, "PLACEMENT_TIMEOUT_S", 2.0)
    start = time.monotonic()
    too_big = _rank_cfg(tiny_model_dir, tmp_path / "big", cluster.address, ray_cpus_per_rank=2)
    with pytest.raises(
        ConfigError,
        match=r"2 trainer ranks of 2 CPU each .* 4 CPU in all \(the cluster has 3; its largest node 1\)",
    ):
        train(too_big)
    assert time.monotonic() - start < 30
    with pytest.raises(EnvNotFoundError, match="no-such-env"):  # raised in each rank, the driver's type
        train(_rank_cfg(tiny_model_dir, tmp_path / "bad", cluster.address, env="no-such-env"))
    _all_cpus_free(3)


def _rank_cfg(tiny_model_dir, run_dir, address, **kw):
    from trainers.config import TrainConfig

    base = dict(
        model=str(tiny_model_dir), run_dir=str(run_dir), steps=5, prompts_per_step=2, group_size=2,
        train_prompts=20, eval_prompts=2, eval_samples=1, max_tokens_per_turn=6, bf16=False,
        skip_equal_reward_groups=False, temperature=1.0, progress=False, threads=1, report_to=("none",),
        checkpoint_every=1, ray_address=address, ray_workers=2, ray_cpus_per_worker=0.5,
        ray_trainer_ranks=2, ray_cpus_per_rank=0.5,
    )  # fmt: skip
    base.update(kw)
    return TrainConfig(**base)


def _train_records(run_dir):
    return [
        r
        for r in (json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines())
        if r["kind"] == "train"
    ]


def test_two_trainer_ranks_with_two_workers_and_a_lost_rank_resumed(cluster, tiny_model_dir, tmp_path):
    """Two trainer ranks (one gloo group of Ray actors) and two rollout workers on the simulated
    cluster; rank 1 is killed with SIGKILL after the first step: the run stops at once naming
    the checkpoint, and ``--resume`` carries it to the end with every step trained once."""
    from trainers.checkpoint import latest_checkpoint
    from trainers.loop import train
    from trainers.ray_ranks import RayTrainerRanks, TrainerRankLostError

    run_dir = tmp_path / "run"
    cfg = _rank_cfg(tiny_model_dir, run_dir, cluster.address)
    start = time.monotonic()
    with RayTrainerRanks(cfg, train) as ranks:
        ranks.start()
        pids = ranks.pids()
        assert len(set(pids)) == 2 and os.getpid() not in pids

        def kill_after_first_step():
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                if latest_checkpoint(run_dir) is not None:
                    os.kill(pids[1], signal.SIGKILL)
                    return
                time.sleep(0.2)

        killer = threading.Thread(target=kill_after_first_step)
        killer.start()
        with pytest.raises(
            TrainerRankLostError, match=r"trainer rank 1 of 2 \(process \d+ on 127.0.0.1\) was lost"
        ) as lost:
            ranks.wait()
        killer.join()
    stopped = time.monotonic() - start
    newest = latest_checkpoint(run_dir)
    assert f"the newest checkpoint is {newest.name}" in str(lost.value) and "--resume" in str(lost.value)
    assert 1 <= len(_train_records(run_dir)) < 5
    result = train(cfg.replace(resume=True))
    print(
        f"stopped after {stopped:.0f} s at {newest.name}; resumed in {time.monotonic() - start - stopped:.0f} s"
    )
    assert result.steps == 5 and result.final is not None and result.final.masked == 0
    steps = _train_records(run_dir)
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]  # none lost, none twice
    assert json.loads((run_dir / "summary.json").read_text())["world_size"] == 2
    assert all(r["ray_workers_restarted"] == 0 and r["episode_staleness_max"] == 0 for r in steps)
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    keys = [(t["step"], t["group_id"], t["sample_index"]) for t in trajs]
    assert sorted(keys) == [(s, g, i) for s in range(1, 6) for g in range(2) for i in range(2)]
    assert all(t["policy_version"] == t["step"] - 1 for t in trajs)
    _all_cpus_free(3)


def _all_cpus_free(cpus, within_s=30):
    """The cluster's ``cpus`` CPUs are all free again (Ray's resource view lags a little)."""
    deadline = time.monotonic() + within_s
    while ray.available_resources().get("CPU", 0) < cpus:
        assert time.monotonic() < deadline, f"reserved still: {ray.available_resources()}"
        time.sleep(0.5)
