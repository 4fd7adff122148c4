"""The held-out report helpers the CPU recipes share: the gain in standard errors and success by
kind of question, against values worked out by hand; a flags file as the config `skyrl train`
would run."""

import math

import pytest

from skyrl_gym.errors import ConfigError
from trainers.config import config_from_flags, read_flags
from trainers.evaluation import EvalResult, gain_in_se, success_by


def _result(success: float, se: float) -> EvalResult:
    return EvalResult(success=success, success_se=se, reward_mean=success, episodes=10, masked=0, seconds=1.0)


def test_gain_in_standard_errors_by_hand():
    # (0.5 - 0.1) / sqrt(0.03^2 + 0.04^2) = 0.4 / 0.05 = 8
    assert gain_in_se(_result(0.1, 0.03), _result(0.5, 0.04)) == pytest.approx(8.0)
    assert gain_in_se(_result(0.5, 0.04), _result(0.1, 0.03)) == pytest.approx(-8.0)
    assert math.isnan(gain_in_se(_result(0.0, 0.0), _result(0.0, 0.0)))


def test_success_by_kind_by_hand():
    per_prompt = {"a": 1.0, "b": 0.0, "c": 0.5, "d": 0.25}
    kinds = {"a": "town", "b": "town", "c": "job"}
    assert success_by(per_prompt, kinds) == {"?": 0.25, "job": 0.5, "town": 0.5}
    assert success_by({}, kinds) == {}


def test_flags_file_is_the_config_skyrl_train_runs(tmp_path):
    f = tmp_path / "x.flags"
    f.write_text("--env search   # the env\n\n--stop </search> </answer>\n--lr 3e-6\n", encoding="utf-8")
    flags = read_flags(f)
    assert flags == ["--env", "search", "--stop", "</search>", "</answer>", "--lr", "3e-6"]
    cfg = config_from_flags(flags)
    assert (cfg.data.env, cfg.rollout.sampling.stop, cfg.optimizer.lr) == (
        "search",
        ("</search>", "</answer>"),
        3e-6,
    )
    with pytest.raises((SystemExit, ConfigError)):
        config_from_flags(["--lrr", "1"])
