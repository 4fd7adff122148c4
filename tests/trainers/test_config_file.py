"""``skyrl train --config FILE`` (decision 0033): TOML, YAML or JSON by flag name, tables as
headings, flags over files, and ``--resume`` reading the run's resolved config back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_gym.config import parse_env_config
from skyrl_gym.errors import ConfigError
from trainers.config import TrainConfig, config_from_flags, read_flags
from trainers.config_file import read_config_file

REPO = Path(__file__).resolve().parents[2]

TOML = """
env = "kvchain"
steps = 3
lr = 2e-5

[rollouts]
max-turns = 10
stop = ["</lookup>", "</answer>"]
temperature = 1          # an integer where a float is meant is fine

[env_config]
hops = 3
name = "3"               # a string that reads as JSON keeps its quotes
kvchain = { distractors = true }
"""

YAML = """
env: kvchain
steps: 3
lr: 2.0e-5
rollouts:
  max_turns: 10
  stop: ["</lookup>", "</answer>"]
  temperature: 1.0
env_config:
  hops: 3
  name: "3"
  kvchain: {distractors: true}
"""


def test_toml_and_yaml_give_the_flags_config(tmp_path):
    (tmp_path / "run.toml").write_text(TOML)
    (tmp_path / "run.yaml").write_text(YAML)
    flags = config_from_flags(
        ["--env", "kvchain", "--steps", "3", "--lr", "2e-5", "--max-turns", "10", "--stop", "</lookup>",
         "</answer>", "--temperature", "1.0", "--env-config", "hops=3", 'name="3"', "kvchain.distractors=true"]
    )  # fmt: skip
    for name in ("run.toml", "run.yaml"):
        cfg = config_from_flags(["--config", str(tmp_path / name)])
        assert cfg == flags, name
    assert parse_env_config(flags.env_config) == {"hops": 3, "name": "3", "kvchain.distractors": True}
    assert isinstance(flags.temperature, float)


def test_flags_win_over_files_and_later_files_over_earlier(tmp_path):
    (tmp_path / "a.toml").write_text('env = "kvchain"\nsteps = 3\ngroup_size = 4\n')
    (tmp_path / "b.yaml").write_text("steps: 5\n")
    cfg = config_from_flags(["--config", str(tmp_path / "a.toml"), "--config", str(tmp_path / "b.yaml")])
    assert (cfg.env, cfg.steps, cfg.group_size) == ("kvchain", 5, 4)
    cfg = config_from_flags(["--steps", "7", "--config", str(tmp_path / "a.toml")])
    assert (cfg.steps, cfg.group_size) == (7, 4)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "x.toml",
            "max_turn = 3\n",
            r"'max_turn' is not a setting of skyrl train\. Did you mean 'max_turns'",
        ),
        ("x.toml", "[rollouts]\nmax_turn = 3\n", r"\[rollouts\] 'max_turn' is not a setting"),
        ("x.toml", 'steps = "3"\n', r"'steps' must be an integer \(e\.g\. 8\), got '3'"),
        ("x.toml", "steps = true\n", r"'steps' must be an integer"),
        ("x.toml", 'stop = "</answer>"\n', r"'stop' must be a list, e\.g\. \[\"text\"\], got '</answer>'"),
        ("x.toml", 'advantage = "grpoo"\n', r"'advantage' must be one of"),
        ("x.toml", "steps = 3\nsteps = 4\n", r"is not valid TOML"),
        ("x.toml", "steps = 3\n[run]\nsteps = 4\n", r"'steps' is set twice"),
        ("x.yaml", "- steps\n", r"must hold a table of settings, not list"),
        ("x.ini", "steps = 3\n", r"unknown format '\.ini'"),
    ],
)
def test_mistakes_name_the_file_and_the_key(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_config_file(tmp_path / name, TrainConfig)


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        config_from_flags(["--config", str(tmp_path / "nope.toml")])


def test_recipe_config_files_match_their_flags_files():
    """The multi-turn recipes ship both spellings; they must say the same."""
    for recipe in ("kvchain", "bisect"):
        pre = REPO / "examples" / "multiturn"
        from_flags = config_from_flags(
            read_flags(pre / "multiturn.flags") + read_flags(pre / f"{recipe}.flags")
        )
        from_files = config_from_flags(
            ["--config", str(pre / "multiturn.toml"), "--config", str(pre / f"{recipe}.toml")]
        )
        assert from_files == from_flags, recipe


@pytest.mark.slow
def test_file_run_resolved_config_resume(tmp_path):
    """file -> run -> the run's config.json -> ``--resume`` with no other flags: the same settings."""
    from skyrl_agent.models import tiny_random_model

    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    run_dir = tmp_path / "run"
    (tmp_path / "tiny.toml").write_text(
        f'model = "{tmp_path / "model"}"\nrun_dir = "{run_dir}"\nsteps = 2\n'
        "[rollouts]\nprompts_per_step = 2\ngroup_size = 2\nmax_tokens_per_turn = 6\ntemperature = 1.0\n"
        "[run]\ntrain_prompts = 20\neval_prompts = 0\nbf16 = false\nskip_equal_reward_groups = false\nthreads = 1\n"
    )

    def train(*argv):
        proc = subprocess.run(
            [sys.executable, "-m", "skyrl_gym", "train", "--no-progress", *argv],
            capture_output=True, text=True, timeout=300, cwd=REPO,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc

    train("--config", str(tmp_path / "tiny.toml"))
    first = (run_dir / "metrics.jsonl").read_text().splitlines()
    saved = json.loads((run_dir / "config.json").read_text())
    assert (saved["steps"], saved["max_tokens_per_turn"], saved["group_size"]) == (2, 6, 2)
    assert saved["model"] == str(tmp_path / "model") and saved["resume"] is False

    train("--run-dir", str(run_dir), "--resume", "--steps", "3")
    again = json.loads((run_dir / "config.json").read_text())
    assert again == {**saved, "steps": 3, "resume": True}
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert lines[: len(first)] == first  # resumed after step 2: its lines kept as they were
    assert [json.loads(line)["step"] for line in lines[len(first) :]] == [3]
