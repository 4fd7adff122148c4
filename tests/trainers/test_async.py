"""Asynchronous rollouts: bounded staleness, the same steps, prompts neither replayed nor skipped."""

import json
import threading
import time

import pytest

from trainers.async_rollouts import AsyncRollouts, RolloutBatch


def run_fake(max_staleness, steps=6, gen_s=0.01, train_s=0.03):
    """A fake producer and trainer; returns what the producer saw and the batches consumed."""
    started = []  # (step, version at start)
    lock = threading.Lock()

    def produce(step, version):
        with lock:
            started.append((step, version))
        time.sleep(gen_s)
        return RolloutBatch(step, [f"traj-{step}"], {"index": step}, version, gen_s)

    rollouts = AsyncRollouts(produce, 1, steps, max_staleness, timeout_s=30).start()
    consumed = []
    try:
        for step in range(1, steps + 1):
            batch = rollouts.get(step)
            consumed.append((step, (step - 1) - batch.policy_version))
            time.sleep(train_s)  # the train step
            rollouts.publish(step)
    finally:
        rollouts.close()
    return started, consumed, rollouts


@pytest.mark.parametrize("k", [0, 1, 2])
def test_staleness_never_exceeds_the_bound_and_every_step_runs(k):
    started, consumed, rollouts = run_fake(k)
    assert [s for s, _ in consumed] == list(range(1, 7))  # the same number of steps, in order
    assert [s for s, _ in started] == list(range(1, 7))  # one batch per step, none extra
    assert all(0 <= st <= k for _, st in consumed)
    if k == 0:
        assert all(st == 0 for _, st in consumed)  # synchronous
    else:  # the trainer is slower than generation: the producer runs ahead up to the bound
        assert max(st for _, st in consumed) == k
        assert rollouts.waits > 0  # and admission control held it back


def test_the_next_batch_is_generated_while_the_trainer_trains():
    started, _, _ = run_fake(1, steps=4, train_s=0.2)
    # batch s + 1 started at version s - 1, i.e. before the train step on batch s had finished
    assert [(s, v) for s, v in started if s > 1] == [(2, 0), (3, 1), (4, 2)]


def test_a_producer_error_reaches_the_trainer():
    def produce(step, version):
        raise RuntimeError("sampler fell over")

    rollouts = AsyncRollouts(produce, 1, 3, 1, timeout_s=10).start()
    with pytest.raises(RuntimeError, match="fell over"):
        rollouts.get(1)
    rollouts.close()


@pytest.mark.slow
def test_async_training_run(tmp_path):
    from skyrl_agent.models import tiny_random_model
    from trainers.config import TrainConfig
    from trainers.data import PromptSampler, load_items
    from trainers.loop import train

    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    cfg = TrainConfig(
        model=str(tmp_path / "model"), run_dir=str(tmp_path / "run"), async_staleness=1, steps=5,
        prompts_per_step=2, group_size=2, train_prompts=20, eval_prompts=4, eval_samples=1,
        eval_every=2, max_tokens_per_turn=6, checkpoint_every=2, bf16=False,
        skip_equal_reward_groups=False, temperature=1.0, progress=False, threads=1,
    )  # fmt: skip
    result = train(cfg)
    assert result.steps == 5 and result.final is not None
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train_records] == [1, 2, 3, 4, 5]
    assert all(0 <= r["staleness"] <= 1 for r in train_records)
    assert train_records[0]["staleness"] == 0  # the first batch comes from the starting weights
    assert all("tis_weight_mean" in r for r in train_records)  # off-policy correction on
    assert all("sync_seconds" in r for r in train_records)  # weights went to the sampler each step
    # prompts in the order the sampler gives them: none replayed, none skipped
    sampler = PromptSampler(
        load_items("calculator", "train", 20, seed=0), seed=0, stratify_by="shape"
    )  # the env's bundled_stratify_by
    expected = [r.prompt_id for _ in range(5) for r in sampler.next(2)]
    trajs = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    seen = [
        t["prompt_id"]
        for t in sorted(trajs, key=lambda t: (t["step"], t["group_id"]))
        if t["sample_index"] == 0
    ]
    assert seen == expected
    # the checkpoint holds the position after the consumed batch, not the producer's
    state = json.loads((tmp_path / "run" / "checkpoints" / "step_000004" / "state.json").read_text())
    assert state["sampler"]["index"] == 8
