"""The new TrainConfig fields are `skyrl train` flags with their docstrings as help."""

import argparse

import pytest

from skyrl_gym.config import add_config_arguments, config_from_args
from skyrl_gym.errors import ConfigError
from trainers.config import TrainConfig


def parse(argv):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, TrainConfig)
    return config_from_args(TrainConfig, parser.parse_args(argv)), parser


def test_flags_map_onto_fields():
    cfg, parser = parse(
        "--lora-rank 8 --lora-alpha 16 --lora-target-modules q_proj v_proj --lora-dropout 0.05 --no-lora-merge "
        "--advantage gae --gae-lambda 0.95 --value-coef 0.25 --value-clip 0.1 --async-staleness 2 "
        "--dist-backend gloo --no-fused-head".split()
    )
    assert (cfg.lora_rank, cfg.lora_alpha, cfg.lora_target_modules, cfg.lora_dropout) == (
        8,
        16,
        ("q_proj", "v_proj"),
        0.05,
    )
    assert not cfg.lora_merge and not cfg.fused_head
    assert (cfg.advantage, cfg.gae_lambda, cfg.value_coef, cfg.value_clip) == ("gae", 0.95, 0.25, 0.1)
    assert cfg.async_staleness == 2 and cfg.dist_backend == "gloo"
    help_text = " ".join(parser.format_help().split())
    assert "at most k updates behind" in help_text and "value head" in help_text


@pytest.mark.parametrize(
    "kwargs",
    [{"async_staleness": -1}, {"gae_lambda": 1.5}, {"value_clip": -0.1}, {"lora_target_modules": "q_proj"}],
)
def test_bad_values_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        TrainConfig(**kwargs)


def test_env_config_flag_reaches_the_rollout_items():
    from trainers.config import parse_env_config
    from trainers.loop import build_items

    cfg = TrainConfig(env_config=("max_turns=3", "db_dir=/data/dbs", 'tags=["a"]'))
    settings = parse_env_config(cfg.env_config)
    assert settings == {"max_turns": 3, "db_dir": "/data/dbs", "tags": ["a"]}
    row = {"id": "r0", "prompt": [{"role": "user", "content": "hi"}]}
    (item,) = build_items([row], "calculator", settings)
    assert item.env_config == settings


def test_malformed_env_config_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        TrainConfig(env_config=("max_turns",))
    with pytest.raises(ConfigError, match="tuple"):
        TrainConfig(env_config="max_turns=3")
