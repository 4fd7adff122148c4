"""Harbor tasks inside the runtime: the agent loop plays the ``harbor`` env and yields
trajectories with the verifier's reward (a scripted policy; the tiny and the bundled model
through ``skyrl harbor rollout``)."""

from __future__ import annotations

import argparse
import json
import shutil

import pytest

from harbor_adapter import bundled_tasks_dir
from harbor_adapter.dataset import prompt_items, rollout_plan
from harbor_adapter.env import tool_call

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def tokenizer():
    from skyrl_agent.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture
def one_task(tmp_path):
    """A folder with only the bundled hello-file task."""
    shutil.copytree(bundled_tasks_dir() / "hello-file", tmp_path / "tasks" / "hello-file")
    return tmp_path / "tasks"


def by_turn(tokenizer, replies):
    """A script that answers each episode's turn k with ``replies[k]`` (episodes run at once, so
    the turn is read from the prompt: one tool response per earlier turn)."""

    def script(prompt_ids, index):
        turn = tokenizer.decode(prompt_ids).count("<tool_response>") + tokenizer.decode(prompt_ids).count(
            "No tool call found"
        )
        return replies[min(turn, len(replies) - 1)]

    return script


def play(policy, items, **config):
    from skyrl_agent.engine import RolloutEngine
    from skyrl_agent.types import RolloutConfig

    cfg = RolloutConfig(max_turns=4, max_tokens_per_turn=64, max_context_tokens=4096, **config)
    return RolloutEngine(policy, cfg, progress=False).run_sync(items)


def test_scripted_policy_rollout_gets_the_verifier_reward(tokenizer, one_task, base_images):
    from skyrl_agent.policies.fake import ScriptedPolicy

    items, overrides = rollout_plan(one_task, max_turns=4)
    assert overrides["env_step_timeout_s"] >= 60 and items[0].env_id == "harbor"
    solve = [tool_call("bash", command="printf 'hello, harbor\\n' > /app/hello.txt"), tool_call("submit")]
    result = play(ScriptedPolicy(tokenizer, by_turn(tokenizer, solve)), items, n_samples=2, **overrides)
    assert [t.reward for t in result.trajectories] == [1.0, 1.0]
    for t in result.trajectories:
        assert not t.masked and t.num_turns == 2 and t.stop_reason == "env_done"
        assert t.turn_rewards == [0.0, 1.0] and t.token_rewards[t.turn_spans[-1][1] - 1] == 1.0
        assert sum(t.loss_mask) < len(t.loss_mask)  # tool output tokens are masked out
        assert t.env_metrics["solved"] and t.env_metrics["commands"] == 1
    wrong = play(
        ScriptedPolicy(tokenizer, [tool_call("bash", command="echo hi > /app/hello.txt")]), items, **overrides
    )
    t = wrong.trajectories[0]
    assert (t.reward, t.masked, t.num_turns) == (0.0, False, 4)  # verified at the env's max_turns


def test_a_verifier_error_masks_the_episode(tokenizer, make_task, base_images):
    from skyrl_agent.policies.fake import ScriptedPolicy

    root = make_task("silent", test_sh="echo no reward\n")
    items = prompt_items(root, max_turns=2)
    result = play(ScriptedPolicy(tokenizer, [tool_call("submit")]), items, max_retries=0)
    t = result.trajectories[0]
    assert t.masked and "RewardError" in t.error and "no reward file" in t.error


def run_rollout_cli(argv):
    from harbor_adapter.cli import add_command

    parser = argparse.ArgumentParser(prog="skyrl")
    add_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_the_old_rollout_flag_names_its_replacement(tmp_path):
    from skyrl_agent.cli import add_rollout_command
    from skyrl_gym.errors import ConfigError

    parser = argparse.ArgumentParser(prog="skyrl")
    add_rollout_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["rollout", "--harbor", "my_tasks", "--out", str(tmp_path / "t.jsonl")])
    with pytest.raises(ConfigError, match="skyrl harbor rollout my_tasks"):
        args.handler(args)


def test_skyrl_rollout_harbor_with_the_tiny_model(one_task, tmp_path, base_images, capsys):
    out = tmp_path / "traj.jsonl"
    argv = ["harbor", "rollout", str(one_task), "--model", "tiny-random", "--max-turns", "2"]
    argv += ["--max-tokens", "12", "--n", "2", "--out", str(out), "--quiet"]
    assert run_rollout_cli(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert row["env_id"] == "harbor" and row["prompt_id"] == "hello-file" and not row["masked"]
        assert row["reward"] == 0.0 and row["num_turns"] == 2  # gibberish: verified at max_turns
        assert row["env_metrics"]["verifier_error"] is False and row["env_metrics"]["format_errors"] >= 1
    assert "wrote 2 trajectories" in capsys.readouterr().out


@pytest.mark.slow
def test_skyrl_rollout_harbor_with_the_bundled_model(one_task, tmp_path, base_images):
    out = tmp_path / "traj.jsonl"
    argv = ["harbor", "rollout", str(one_task), "--max-turns", "1", "--max-tokens", "16"]
    argv += ["--temperature", "0.8", "--out", str(out), "--quiet", "--threads", "2"]
    assert run_rollout_cli(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1
    for row in rows:
        assert not row["masked"] and row["reward"] in (0.0, 1.0)
        assert row["rollout_logprobs"] and len(row["response_ids"]) == len(row["loss_mask"])
        assert "verifier_error" in row["env_metrics"] and row["env_metrics"]["verifier_error"] is False


@pytest.mark.slow
def test_a_training_step_on_harbor_rows(one_task, tmp_path, base_images):
    """`skyrl harbor prompts` rows train with the native trainer (`skyrl train --env harbor
    --data rows.jsonl`): one GRPO step of a tiny model, rewards from the task's verifier."""
    from harbor_adapter.cli import add_command
    from skyrl_agent.models import tiny_random_model
    from trainers.config import TrainConfig
    from trainers.loop import train

    model_dir = tmp_path / "tiny"
    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    rows = tmp_path / "rows.jsonl"
    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["harbor", "prompts", str(one_task), "--max-turns", "2", "--out", str(rows)])
    assert args.handler(args) == 0
    cfg = TrainConfig(
        env="harbor",
        data=str(rows),
        model=str(model_dir),
        run_dir=str(tmp_path / "run"),
        steps=1,
        prompts_per_step=1,
        group_size=2,
        train_prompts=0,
        eval_prompts=0,
        max_turns=2,
        max_tokens_per_turn=8,
        bf16=False,
        skip_equal_reward_groups=False,
        threads=1,
        progress=False,
    )
    result = train(cfg)
    assert result.steps == 1
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = [m for m in logged if m.get("step") == 1 and m.get("kind") == "train"][-1]
    assert (step["episodes"], step["masked"], step["reward_mean"], step["turns_mean"]) == (2, 0, 0.0, 2.0)
    trajs = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert {t["env_id"] for t in trajs} == {"harbor"} and all(t["turn_rewards"] == [0.0, 0.0] for t in trajs)
