import argparse
import re
import tomllib
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_agent.cli import add_rollout_command
from skyrl_agent.io import load_jsonl, load_parquet


def _cli(argv):
    parser = argparse.ArgumentParser(prog="skyrl")
    add_rollout_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.handler(args)


@pytest.fixture
def registered():
    ids = {
        "cli-echo": "tests.agent.envs:EchoEnv",
        "cli-calc": "tests.agent.envs:CalcToolEnv",
        "cli-sql": "tests.agent.envs:SqlEnv",
    }
    for env_id, entry in ids.items():
        skyrl_gym.register(env_id, entry)
    yield
    for env_id in ids:
        skyrl_gym.deregister(env_id)


def test_rollout_verb_is_declared_in_pyproject():
    data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert data["project"]["entry-points"]["skyrl.cli"]["rollout"] == "skyrl_agent.cli:add_rollout_command"


def test_rollout_with_a_tiny_model_writes_trajectories(registered, tmp_path, capsys):
    out = tmp_path / "run.jsonl"
    code = _cli(
        [
            "rollout",
            "--env",
            "cli-echo",
            "--model",
            "tiny-random",
            "--n",
            "3",
            "--num-prompts",
            "2",
            "--max-turns",
            "2",
            "--max-tokens",
            "4",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    trajs = load_jsonl(out)
    assert len(trajs) == 6 and {t.group_id for t in trajs} == {0, 1}
    assert all(t.num_turns == 2 and t.env_id == "cli-echo" for t in trajs)
    printed = capsys.readouterr().out
    assert "mean reward" in printed and "episodes                    6" in printed.replace(" " * 0, "")
    code = _cli(
        [
            "rollout",
            "--env",
            "cli-echo",
            "--model",
            "tiny-random",
            "--max-turns",
            "1",
            "--max-tokens",
            "2",
            "--out",
            str(tmp_path / "run.parquet"),
            "--quiet",
        ]
    )
    assert code == 0 and len(load_parquet(tmp_path / "run.parquet")) == 1
    with pytest.raises(skyrl_gym.ConfigError, match=".jsonl or .parquet"):
        _cli(["rollout", "--env", "cli-echo", "--out", str(tmp_path / "x.csv")])


@pytest.mark.slow
def test_rollout_bundled_smollm2_on_tool_use_and_sql(registered, tmp_path, capsys):
    """The real bundled model, multi-turn, from the command line: a tool-use env (observations
    as tool messages with the shipped chatml_tools template) and a text-to-SQL env (observations
    inline, turns stopped at </sql>)."""
    out = tmp_path / "calc.jsonl"
    assert (
        _cli(
            [
                "rollout",
                "--env",
                "cli-calc",
                "--n",
                "2",
                "--max-turns",
                "2",
                "--max-tokens",
                "12",
                "--temperature",
                "1.0",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    calc = load_jsonl(out)
    assert len(calc) == 2 and all(not t.masked for t in calc)
    from skyrl_agent.models import load_tokenizer

    prompt_text = load_tokenizer().decode(calc[0].prompt_ids)
    assert '"name": "calc"' in prompt_text and "<tools>" in prompt_text  # chatml_tools rendered the tool list
    for t in calc:
        t.validate()
        assert t.rollout_logprobs is not None and all(lp <= 0 for lp in t.rollout_logprobs)
    out = tmp_path / "sql.jsonl"
    assert (
        _cli(
            [
                "rollout",
                "--env",
                "cli-sql",
                "--n",
                "2",
                "--max-turns",
                "2",
                "--max-tokens",
                "16",
                "--observation-style",
                "inline",
                "--stop",
                "</sql>",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    sql = load_jsonl(out)
    assert len(sql) == 2 and all(not t.masked for t in sql)
    assert all(t.num_turns >= 1 for t in sql)
    assert "episodes" in capsys.readouterr().out


def test_rollout_on_the_builtin_calculator_env(tmp_path):
    out = tmp_path / "calc.jsonl"
    assert (
        _cli(
            [
                "rollout",
                "--env",
                "calculator",
                "--model",
                "tiny-random",
                "--n",
                "2",
                "--max-turns",
                "2",
                "--max-tokens",
                "4",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    trajs = load_jsonl(out)
    assert len(trajs) == 2 and all(t.env_id == "calculator" and not t.masked for t in trajs)


def test_eval_prints_success_rate_pass_at_k_and_env_metrics(registered, tmp_path, capsys):
    from skyrl_agent.cli import add_eval_command

    parser = argparse.ArgumentParser(prog="skyrl")
    add_eval_command(parser.add_subparsers(dest="command"))
    out = tmp_path / "eval.jsonl"
    args = parser.parse_args(
        [
            "eval",
            "--env",
            "cli-echo",
            "--model",
            "tiny-random",
            "--n",
            "2",
            "--num-prompts",
            "2",
            "--max-turns",
            "2",
            "--max-tokens",
            "3",
            "--success-threshold",
            "0.2",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert args.temperature == 0.0  # greedy by default
    assert args.handler(args) == 0
    printed = capsys.readouterr().out
    lines = dict(
        re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in printed.splitlines() if "  " in line
    )
    assert lines["success rate"].strip() == "1.0000"  # two turns of 0.1 reach the 0.2 threshold
    assert lines["pass@2"].strip() == "1.0000" and lines["env: turns"].strip() == "2.0000"
    assert len(load_jsonl(out)) == 4
