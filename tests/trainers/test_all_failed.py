"""A failure that hits every episode stops the run with what went wrong, instead of training
and evaluating on nothing (issue 47's "0.00 -> 0.00 and exit code 0")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_agent.failures import Failure, FailureStage
from skyrl_agent.types import Trajectory
from skyrl_gym.errors import EpisodesFailedError
from trainers.rollouts import check_not_all_failed


def _lost(error: Failure | str) -> Trajectory:
    return Trajectory.failed(error, prompt_id="p", group_id=0, sample_index=0, env_id="e")


def test_all_masked_raises_with_the_failures_counted():
    trajs = [_lost("RegistrationError: No module named 'x'\ntraceback...")] * 3 + [
        _lost("TimeoutError: slow")
    ]
    with pytest.raises(
        EpisodesFailedError,
        match=r"all 4 episodes failed.*3 x unknown/RegistrationError; 1 x unknown/TimeoutError.*"
        r"The most common: RegistrationError: No module named 'x'\. To fix it",
    ):
        check_not_all_failed(trajs)


def test_a_typed_failure_says_how_to_fix_it():
    missing = Failure.of(ModuleNotFoundError("No module named 'my_env'"), FailureStage.SETUP, "env set-up")
    with pytest.raises(EpisodesFailedError) as raised:
        check_not_all_failed([_lost(missing)] * 2)
    message = str(raised.value)
    assert "2 x setup/ModuleNotFoundError" in message and "not retriable, so not retried" in message
    assert "install it" in message and "--import" in message
    bug = Failure.of(KeyError("answer"), FailureStage.ENV, "env.step (turn 0)")
    with pytest.raises(EpisodesFailedError, match="it is a bug, not bad luck.*check_env"):
        check_not_all_failed([_lost(bug)])


def test_some_masked_or_none_is_fine():
    ok = _lost("x")
    ok.masked = False
    check_not_all_failed([ok, _lost("TimeoutError")])
    check_not_all_failed([])


@pytest.mark.slow
def test_skyrl_train_stops_when_every_episode_fails(tmp_path):
    from skyrl_agent.models import tiny_random_model

    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    rows = [
        {"prompt": [{"role": "user", "content": f"task {i}"}], "env_class": "test-broken"} for i in range(4)
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = (
        "import sys, skyrl_gym; from skyrl_gym.cli import main; "
        "skyrl_gym.register('test-broken', 'tests.envs_for_tests:BrokenSetupEnv'); "
        "sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "train", "--env", "test-broken", "--data", str(tmp_path / "rows.jsonl"),
         "--model", str(tmp_path / "model"), "--run-dir", str(tmp_path / "run"), "--steps", "2",
         "--prompts-per-step", "2", "--group-size", "2", "--eval-prompts", "0", "--max-turns", "1",
         "--max-tokens-per-turn", "4", "--no-progress", "--threads", "1"],
        capture_output=True, text=True, timeout=240, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "all 4 episodes failed" in proc.stderr and "my_missing_dependency" in proc.stderr, proc.stderr[
        -2000:
    ]
    assert "4 x setup/" in proc.stderr and "To fix it" in proc.stderr, proc.stderr[-2000:]


def test_the_step_metrics_count_failures_by_stage_and_kind():
    from trainers.async_rollouts import RolloutBatch
    from trainers.rollouts import rollout_metrics

    lost = Failure.of(ConnectionError("reset"), FailureStage.ENV, "env.step (turn 1)")
    ok = _lost("x")
    ok.masked, ok.error = False, None
    trajs = [_lost(lost), _lost(lost), _lost("TimeoutError: old file"), ok]
    batch = RolloutBatch(step=1, trajectories=trajs, sampler_state={}, policy_version=0, gen_seconds=1.0)
    m = rollout_metrics(batch, [ok], set(), step=1, wait_s=0.0)
    assert m["masked"] == 3
    assert m["failures/env/ConnectionError"] == 2 and m["failures/unknown/TimeoutError"] == 1
    assert not any(k.startswith("failures/") for k in rollout_metrics(
        RolloutBatch(step=1, trajectories=[ok], sampler_state={}, policy_version=0, gen_seconds=1.0),
        [ok], set(), step=1, wait_s=0.0,
    ))  # fmt: skip
