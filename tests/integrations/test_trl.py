"""Our envs inside TRL's GRPOTrainer through its rollout_func (no TRL subclass, no patch)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from integrations.trl import env_reward, make_rollout_func, prompt_key  # noqa: E402
from skyrl_agent.types import RolloutConfig, SamplingParams  # noqa: E402
from skyrl_gym.errors import ConfigError  # noqa: E402


def test_prompt_key_ignores_none_fields_and_key_order():
    a = [{"role": "user", "content": "hi"}]
    b = [{"content": "hi", "role": "user", "tool_calls": None}]
    assert prompt_key(a) == prompt_key(b)
    assert prompt_key(a) != prompt_key([{"role": "user", "content": "hi!"}])


def test_rows_with_same_prompt_but_different_extras_are_refused():
    rows = [
        {"prompt": [{"role": "user", "content": "q"}], "env_class": "text2sql", "db_id": "a"},
        {"prompt": [{"role": "user", "content": "q"}], "env_class": "text2sql", "db_id": "b"},
    ]
    with pytest.raises(ConfigError, match="same prompt"):
        make_rollout_func(rows)


def test_env_reward_needs_the_rollout_field():
    with pytest.raises(ConfigError, match="rollout_func"):
        env_reward(["p"], ["c"])
    assert env_reward(["p", "p"], ["c", "c"], env_reward=[1, None]) == [1.0, None]


@pytest.mark.slow
def test_two_grpo_steps_on_text2sql_with_env_rewards(tmp_path):
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from skyrl_agent.models import tiny_random_model
    from skyrl_gym.envs.sql.prompt import load_bundled_rows

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(0)
    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    rows = load_bundled_rows("train", max_turns=2)[:4]
    rollout = make_rollout_func(
        rows,
        env_config={"max_turns": 2},
        rollout_config=RolloutConfig(
            max_turns=2,
            max_tokens_per_turn=12,
            sampling=SamplingParams(temperature=1.0),
            env_calls="inline",
        ),
    )
    # Every training forward pass records its input ids: TRL must feed exactly our ids.
    fed: list[torch.Tensor] = []

    def record(module, args, kwargs):
        if torch.is_grad_enabled():
            fed.append(kwargs["input_ids"].detach().clone())

    model.register_forward_pre_hook(record, with_kwargs=True)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=2,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        max_completion_length=64,
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[env_reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        rollout_func=rollout,
    )
    trainer.train()
    rollout.close()

    logs = [h for h in trainer.state.log_history if "rewards/env_reward/mean" in h]
    assert len(logs) == 2, trainer.state.log_history
    trajs = rollout.last_trajectories
    assert len(trajs) == 4 and rollout.calls == 2
    # The logged reward is the mean of the env's rewards of the episodes of that step.
    want = sum(t.reward for t in trajs) / len(trajs)
    assert logs[-1]["rewards/env_reward/mean"] == pytest.approx(want)
    assert all(t.reward in (-1.0, 0.0, 1.0) for t in trajs)  # text2sql's reward scale
    # Multi-turn episodes with observation tokens (mask 0) between the turns.
    multi = [t for t in trajs if t.num_turns == 2]
    assert multi, [t.stop_reason for t in trajs]
    assert all(0 in t.loss_mask and 1 in t.loss_mask for t in multi)
    # TRL used our env mask in its loss: the last generation batch carries it as `tool_mask`,
    # equal to our loss masks, and its completion ids are our response ids.
    batch = trainer._buffered_inputs[0]
    got = {}
    for ids, cmask, tmask in zip(
        batch["completion_ids"], batch["completion_mask"], batch["tool_mask"], strict=True
    ):
        n = int(cmask.sum())
        got[tuple(ids[:n].tolist())] = tmask[:n].tolist()
    for t in trajs:
        assert got[tuple(t.response_ids)] == t.loss_mask
    # Token in, token out: every training forward saw prompt_ids + response_ids of an episode.
    seqs = {tuple(t.prompt_ids + t.response_ids) for t in trajs}
    last_fed = fed[-1]
    pad = tok.pad_token_id
    for row in last_fed:
        ids = row.tolist()
        while ids and ids[0] == pad:  # TRL left-pads prompts and right-pads completions
            ids.pop(0)
        assert any(tuple(ids[: len(s)]) == s and all(x == pad for x in ids[len(s) :]) for s in seqs)
    # Advantages were nonzero somewhere or the rewards were all equal; either way the run ended
    # with finite losses and the weights moved only if there was a signal.
    assert all(h.get("loss") is None or h["loss"] == h["loss"] for h in trainer.state.log_history)
    moved = any(not torch.equal(before[k], v) for k, v in model.named_parameters())
    rewards = {t.reward for t in trajs}
    assert moved or len(rewards) == 1


@pytest.mark.slow
def test_trl_example_smoke_run():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "trl_text2sql.py"
    spec = importlib.util.spec_from_file_location("trl_text2sql_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    last = module.main(
        ["--model", "tiny", "--steps", "1", "--prompts", "2", "--group", "2", "--max-tokens-per-turn", "8"]
    )
    assert -1.0 <= last["rewards/env_reward/mean"] <= 1.0


def test_rollout_func_runs_inside_a_running_event_loop():
    """A notebook calls trainer.train() with an event loop running: the rollout must still work."""
    import asyncio
    from types import SimpleNamespace

    import torch

    from skyrl_agent.models import tiny_random_model
    from skyrl_gym.envs.sql.prompt import load_bundled_rows

    torch.manual_seed(0)
    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    rows = load_bundled_rows("train", max_turns=2)[:1]
    rollout = make_rollout_func(
        rows, env_config={"max_turns": 2}, rollout_config=RolloutConfig(max_turns=2, max_tokens_per_turn=4)
    )
    trainer = SimpleNamespace(
        model=model, processing_class=tok, accelerator=SimpleNamespace(unwrap_model=lambda m: m)
    )

    async def in_loop():
        return rollout([rows[0]["prompt"]] * 2, trainer)

    out = asyncio.run(in_loop())
    rollout.close()
    assert len(out["completion_ids"]) == 2 and len(out["env_reward"]) == 2
    for ids, mask, lps in zip(out["completion_ids"], out["env_mask"], out["logprobs"], strict=True):
        assert len(ids) == len(mask) == len(lps) and mask[0] == 1
    assert all(r in (-1.0, 0.0, 1.0) for r in out["env_reward"])


def test_failed_episodes_get_no_reward_and_no_loss():
    from integrations.trl import rollout_to_trl
    from skyrl_agent.types import StopReason, Trajectory

    good = Trajectory(
        [1, 2],
        [3, 4, 5, 6],
        [1, 1, 0, 1],
        [-0.5, -0.1, 0.0, -0.2],
        [0, 0, 0, 1.0],
        1.0,
        StopReason.ENV_DONE,
        num_turns=2,
    )
    crashed = Trajectory([1, 2], [3, 4], [1, 1], [-0.5, -0.1], [0, 0], 0.0, StopReason.ENV_ERROR, masked=True)
    setup_failed = Trajectory([], [], [], None, [], 0.0, StopReason.ENV_ERROR, masked=True)
    out = rollout_to_trl([good, crashed, setup_failed], [[], [], [7, 8]], eos_id=9)
    assert out["env_reward"] == [1.0, None, None]
    assert out["env_mask"] == [[1, 1, 0, 1], [0, 0], [0]]
    assert out["prompt_ids"] == [[1, 2], [1, 2], [7, 8]]
    assert out["completion_ids"] == [[3, 4, 5, 6], [3, 4], [9]]
    assert out["logprobs"][0] == [-0.5, -0.1, 0.0, -0.2]
    assert out["env_turns"] == [2, 0, 0]


def test_an_episode_of_several_training_rows_is_refused_not_cut_to_its_last_stretch():
    """An episode whose context was rewritten trains as one row per stretch
    (trainers.rows.training_rows); TRL takes one completion per prompt, so the bridge says so
    instead of handing over the last stretch alone."""
    from integrations.trl import TRLRollout, rollout_to_trl
    from skyrl_agent.types import RolloutConfig, Segment, StopReason, Trajectory
    from skyrl_gym.errors import ConfigError

    first = Segment([1, 2], [3, 4, 5], [1, 1, 0], None, [(0, 2)])
    rewritten = Trajectory(
        [1, 9],
        [6, 7],
        [1, 1],
        None,
        [0.0, 1.0],
        1.0,
        StopReason.ENV_DONE,
        num_turns=2,
        turn_rewards=[0.0, 1.0],
        turn_spans=[(0, 2)],
        segments=[first],
        context_strategy="drop_observations",
        context_rewrites=1,
    )
    plain = Trajectory([1, 2], [3, 4], [1, 1], None, [0, 1.0], 1.0, StopReason.ENV_DONE, num_turns=1)
    assert rollout_to_trl([plain], [[]], eos_id=9)["completion_ids"] == [[3, 4]]
    with pytest.raises(ConfigError, match="episode 1 trains as 2 rows.*drop_observations"):
        rollout_to_trl([plain, rewritten], [[], []], eos_id=9)
    rows = [{"prompt": [{"role": "user", "content": "q"}], "env_class": "gsm8k"}]
    for cfg in (
        RolloutConfig(context_strategy="drop_observations", observation_style="messages"),
        RolloutConfig(step_wise=True),
    ):
        with pytest.raises(ConfigError, match="one completion per prompt"):
            TRLRollout(rows, rollout_config=cfg)
