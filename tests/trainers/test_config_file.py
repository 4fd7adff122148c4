"""``skyrl train --config FILE`` (decision 0033) and the nested config (decision 0035): TOML,
YAML or JSON by flag name, a part's table or a heading, flags over files, ``--resume`` reading
the run's resolved config back, and a config.json written before the nested config loading."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from skyrl_agent.types import RolloutConfig
from skyrl_gym.config import parse_env_config
from skyrl_gym.errors import ConfigError
from trainers.config import (
    OptimizerConfig,
    TrainConfig,
    config_from_flags,
    default_rollout,
    read_flags,
    saved_config,
    train_settings,
)
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
    assert parse_env_config(flags.data.env_config) == {"hops": 3, "name": "3", "kvchain.distractors": True}
    assert isinstance(flags.rollout.sampling.temperature, float)


def test_a_heading_may_share_a_setting_s_name(tmp_path):
    (tmp_path / "h.toml").write_text('[model]\nmodel = "m"\nlora_rank = 4\n[data]\ndata = "rows.jsonl"\n')
    cfg = config_from_flags(["--config", str(tmp_path / "h.toml")])
    assert (cfg.model.path, cfg.model.lora_rank, cfg.data.path) == ("m", 4, "rows.jsonl")
    (tmp_path / "nested.toml").write_text("[a]\n[a.b]\nsteps = 3\n")
    with pytest.raises(ConfigError, match=r"\[a\] 'b' is not a setting"):
        read_config_file(tmp_path / "nested.toml", TrainConfig)


def test_flags_win_over_files_and_later_files_over_earlier(tmp_path):
    (tmp_path / "a.toml").write_text('env = "kvchain"\nsteps = 3\ngroup_size = 4\n')
    (tmp_path / "b.yaml").write_text("steps: 5\n")
    cfg = config_from_flags(["--config", str(tmp_path / "a.toml"), "--config", str(tmp_path / "b.yaml")])
    assert (cfg.data.env, cfg.run.steps, cfg.rollout.n_samples) == ("kvchain", 5, 4)
    cfg = config_from_flags(["--steps", "7", "--config", str(tmp_path / "a.toml")])
    assert (cfg.run.steps, cfg.rollout.n_samples) == (7, 4)


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


def test_the_config_is_seven_parts_and_the_rollout_part_is_the_runtime_s():
    cfg = TrainConfig()
    assert [f.name for f in dataclasses.fields(TrainConfig)] == [
        "data", "model", "rollout", "algorithm", "optimizer", "sampler", "run",
    ]  # fmt: skip
    assert type(cfg.rollout) is RolloutConfig  # reused, not copied
    # flat settings and parts build the same config
    by_parts = TrainConfig(
        rollout=dataclasses.replace(default_rollout(), max_turns=10, n_samples=4),
        optimizer=OptimizerConfig(lr=2e-5),
    )
    assert TrainConfig(max_turns=10, group_size=4, lr=2e-5) == by_parts
    assert by_parts.rollout.sampling.max_tokens == by_parts.rollout.max_tokens_per_turn == 40
    # one budget: max_tokens_per_turn is the sampler's max_tokens too
    assert TrainConfig(max_tokens_per_turn=48).rollout.sampling.max_tokens == 48
    # settings apply on top of the parts given
    assert TrainConfig(rollout=by_parts.rollout, temperature=1.0).rollout.max_turns == 10


def test_every_setting_round_trips_through_settings_tables_and_flags(tmp_path):
    cfg = TrainConfig(env="kvchain", model="m", data="rows.jsonl", max_turns=10, lr=2e-5, lora_rank=4,
                      group_filter="skip_counted", sampler_max_rows=16, env_config=("hops=3",), seed=3)  # fmt: skip
    assert TrainConfig(**cfg.as_settings()) == cfg
    assert set(cfg.as_settings()) == set(train_settings())
    (tmp_path / "config.json").write_text(json.dumps(cfg.as_tables()))
    assert saved_config(tmp_path) == cfg
    assert config_from_flags(["--config", str(tmp_path / "config.json")]) == cfg
    # replace() takes flat names: data and model are the rows file and the model path
    moved = cfg.replace(data="other.jsonl", model="m2", steps=2)
    assert (moved.data.path, moved.data.env, moved.model.path, moved.model.lora_rank) == (
        "other.jsonl", "kvchain", "m2", 4,
    )  # fmt: skip
    assert moved.run.steps == 2 and moved.run.seed == 3


def test_a_part_s_table_takes_its_settings_by_flag_or_field_name(tmp_path):
    (tmp_path / "p.toml").write_text(
        '[model]\npath = "m"\n[rollout]\nn_samples = 4\ntemperature = 1.0\n[sampler]\nmax_rows = 16\n'
        '[algorithm]\ngroup_filter = "dynamic"\n'
    )
    cfg = config_from_flags(["--config", str(tmp_path / "p.toml")])
    assert (cfg.model.path, cfg.rollout.n_samples, cfg.rollout.sampling.temperature) == ("m", 4, 1.0)
    assert (cfg.sampler.max_rows, cfg.algorithm.group_filter) == (16, "dynamic")
    (tmp_path / "wrong.toml").write_text("[rollout]\nlr = 1e-5\n")
    with pytest.raises(
        ConfigError, match=r"\[rollout\] 'lr' is not a setting of \[rollout\]; it belongs in \[optimizer\]"
    ):
        read_config_file(tmp_path / "wrong.toml", TrainConfig)


def test_a_config_json_from_before_the_nested_config_loads(tmp_path):
    """Written by the flat TrainConfig of 2026-12-05 (83 fields, the group filter as three
    booleans): every value lands in its part."""
    cfg = TrainConfig(
        **read_config_file(Path(__file__).parent / "data" / "config-2026-12-05.json", TrainConfig)
    )
    assert (cfg.data.env, cfg.data.env_config, cfg.model.path, cfg.model.lora_rank) == (
        "kvchain", ("examples=2",), "some/model", 4,
    )  # fmt: skip
    assert (cfg.rollout.max_turns, cfg.rollout.max_tokens_per_turn, cfg.rollout.sampling.stop) == (
        10, 48, ("</tool_call>", "</answer>"),
    )  # fmt: skip
    assert cfg.algorithm.group_filter == "skip_counted"  # count_flat_groups=true, skip=true
    assert (cfg.algorithm.reduction, cfg.optimizer.lr, cfg.sampler.max_rows) == (
        "seq_mean_token_mean",
        2e-5,
        32,
    )
    assert (cfg.run.steps, cfg.run.run_dir) == (3, "runs/kvchain-old")
    (tmp_path / "config.json").write_text(
        (Path(__file__).parent / "data" / "config-2026-12-05.json").read_text()
    )
    assert saved_config(tmp_path) == cfg  # what --resume and skyrl export read


@pytest.mark.parametrize(
    ("flags", "spelled"),
    [
        ([], "skip"),
        (["--no-skip-equal-reward-groups"], "none"),
        (["--count-flat-groups"], "skip_counted"),
        (["--dynamic-sampling"], "dynamic"),
        (["--group-filter", "none"], "none"),
    ],
)
def test_the_old_group_flags_spell_a_group_filter(flags, spelled):
    assert config_from_flags(flags).algorithm.group_filter == spelled


def test_mistakes_in_settings_name_the_fix():
    with pytest.raises(
        ConfigError, match="'max_turn' is not a setting of TrainConfig. Did you mean 'max_turns'"
    ):
        TrainConfig(max_turn=3)
    with pytest.raises(ConfigError, match="needs skip_equal_reward_groups on"):
        TrainConfig(dynamic_sampling=True, skip_equal_reward_groups=False)
    with pytest.raises(ConfigError, match="takes a OptimizerConfig"):
        TrainConfig(optimizer={"lr": 1e-5})
