"""``skyrl train --config FILE`` (decision 0033): TOML, YAML or JSON by flag name, tables as
headings, flags over files, and ``--resume`` reading the run's resolved config back."""

from __future__ import annotations

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


def test_a_heading_may_share_a_setting_s_name(tmp_path):
    (tmp_path / "h.toml").write_text('[model]\nmodel = "m"\nlora_rank = 4\n[data]\ndata = "rows.jsonl"\n')
    cfg = config_from_flags(["--config", str(tmp_path / "h.toml")])
    assert (cfg.model, cfg.lora_rank, cfg.data) == ("m", 4, "rows.jsonl")
    (tmp_path / "nested.toml").write_text("[a]\n[a.b]\nsteps = 3\n")
    with pytest.raises(ConfigError, match=r"\[a\] 'b' is not a setting"):
        read_config_file(tmp_path / "nested.toml", TrainConfig)


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


# file -> run -> resolved config -> --resume: tests/trainers/test_resume.py::test_sigkill_then_resume
