"""Checkpoints, the prompt sampler, metrics files and plots."""

import json
import random

import pytest
import torch

from skyrl_agent.types import PromptItem
from skyrl_gym.errors import ConfigError, EnvNotFoundError
from trainers.checkpoint import TrainState, latest_checkpoint, load_checkpoint, rng_state, save_checkpoint
from trainers.data import PromptSampler, load_items
from trainers.metrics import MetricsLogger, plot_metrics, read_jsonl, truncate_jsonl


def _model_and_opt():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def _train_a_bit(model, opt, sched, n=3):
    for _ in range(n):
        loss = model(torch.randn(5, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def test_checkpoint_round_trip_restores_everything(tmp_path):
    model, opt, sched = _model_and_opt()
    _train_a_bit(model, opt, sched)
    sampler = PromptSampler([{"id": str(i), "prompt": []} for i in range(10)], seed=3)
    sampler.next(4)
    state = TrainState(step=3, sampler=sampler.state_dict(), rng=rng_state(), extra={"best": 0.5})
    save_checkpoint(tmp_path, model=model, optimizer=opt, scheduler=sched, state=state)
    expected_next = (random.random(), torch.rand(1).item())
    _train_a_bit(model, opt, sched)  # move on, then restore

    model2, opt2, sched2 = _model_and_opt()
    restored = load_checkpoint(latest_checkpoint(tmp_path), model=model2, optimizer=opt2, scheduler=sched2)
    assert restored.step == 3 and restored.extra == {"best": 0.5}
    assert (random.random(), torch.rand(1).item()) == expected_next
    assert sched2.last_epoch == 3
    assert opt2.state_dict()["state"][0]["step"] == 3
    s2 = PromptSampler([{"id": str(i), "prompt": []} for i in range(10)], seed=3)
    s2.load_state_dict(restored.sampler)
    assert [r["id"] for r in s2.next(3)] == [r["id"] for r in sampler.next(3)]


def test_checkpoint_keeps_newest_and_ignores_partial(tmp_path):
    model, opt, sched = _model_and_opt()
    for step in (1, 2, 3):
        state = TrainState(step=step, sampler={}, rng=rng_state(), extra={})
        save_checkpoint(tmp_path, model=model, optimizer=opt, scheduler=sched, state=state, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step_000002", "step_000003"]
    (tmp_path / "checkpoints" / "step_000009").mkdir()  # a torn write: no COMPLETE marker
    assert latest_checkpoint(tmp_path).name == "step_000003"
    assert latest_checkpoint(tmp_path / "nothing") is None


def test_sampler_epochs_cover_every_prompt_once():
    rows = [PromptItem("calculator", (), prompt_id=str(i)) for i in range(7)]
    sampler = PromptSampler(rows, seed=0)
    first = [r.prompt_id for r in sampler.next(7)]
    second = [r.prompt_id for r in sampler.next(7)]
    assert sorted(first) == sorted(second) == sorted(r.prompt_id for r in rows)
    assert first != second  # reshuffled per epoch
    with pytest.raises(ConfigError, match="same data and seed"):
        PromptSampler(rows, seed=1).load_state_dict(sampler.state_dict())


def test_load_items_builtin_and_file(tmp_path):
    items = load_items("calculator", "train", 5)
    assert len(items) == 5 and all(i.env_id == "calculator" and i.prompt_id for i in items)
    # bundled rows come through the env's hook (search has no generator, only its bundled set)
    search = load_items("search", "test")
    assert search and {i.env_id for i in search} == {"search"}
    assert not {i.prompt_id for i in search} & {i.prompt_id for i in load_items("search", "train")}
    # a file: each row keeps its own env and env_config; rows naming no env get the run's
    path = tmp_path / "rows.jsonl"
    rows = [{"prompt": [{"role": "user", "content": str(i)}]} for i in range(3)]
    rows[1] |= {"env_class": "gsm8k", "env_config": {"max_turns": 2}, "id": "mine"}
    path.write_text("\n".join(json.dumps(r) for r in rows))
    items = load_items("calculator", path=str(path))
    assert [(i.env_id, i.prompt_id) for i in items] == [
        ("calculator", "0"),
        ("gsm8k", "mine"),
        ("calculator", "2"),
    ]
    assert items[1].env_config == {"max_turns": 2} and items[0].env_config == {}
    assert "prompt" not in items[0].extras and "env_class" not in items[1].extras
    with pytest.raises(ConfigError, match="no bundled"):
        load_items("ask_user")
    with pytest.raises(EnvNotFoundError, match="no env registered"):
        load_items("no-such-env")
    with pytest.raises(ConfigError, match="does not exist"):
        load_items("x", path=str(tmp_path / "missing.jsonl"))


def test_metrics_jsonl_truncate_and_plot(tmp_path):
    logger = MetricsLogger(tmp_path)
    for step in range(1, 6):
        logger.log(step, "train", {"reward_mean": step / 5, "kl": 0.01 * step, "entropy": 1.0})
    logger.log(5, "eval", {"success": 0.8, "success_se": 0.05})
    logger.close()
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 6, "kind": "tr')  # torn line from a kill
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 6
    assert truncate_jsonl(tmp_path / "metrics.jsonl", 3) == 3
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3]
    png = plot_metrics(tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "tensorboard").is_dir()


@pytest.mark.slow
def test_held_out_evaluation_reports_the_env_metrics(tmp_path):
    """The env's per-episode metrics (search: answer_supported, searches, ...) are averaged in
    every held-out evaluation: in the metrics log as env/<name>, in summary.json, in the plot."""
    from skyrl_agent.models import tiny_random_model
    from trainers.config import TrainConfig
    from trainers.loop import train

    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    cfg = TrainConfig(
        env="search", model=str(tmp_path / "model"), run_dir=str(tmp_path / "run"), steps=1,
        prompts_per_step=1, group_size=2, train_prompts=4, eval_prompts=2, eval_samples=1,
        max_turns=2, max_tokens_per_turn=6, skip_equal_reward_groups=False, bf16=False,
        progress=False, threads=1, report_to=(),
    )  # fmt: skip
    result = train(cfg)
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    evals = [r for r in records if r["kind"] == "eval"]
    assert len(evals) == 2 and all(0.0 <= r["env/answer_supported"] <= 1.0 for r in evals)
    assert all("env/searches" in r and "env/correct" in r for r in evals)
    assert "answer_supported" in result.final.env_metrics
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(summary["final"]["env_metrics"]) >= {"answer_supported", "searches"}
    assert (tmp_path / "run" / "metrics.png").stat().st_size > 0
