"""Typed failures (issue 47, decision 0032): made at one boundary with a stage, a kind and whether
a retry may help; retried only where retriable; counted by kind; kept through files."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyrl_agent.engine import RolloutEngine, RolloutStats
from skyrl_agent.failures import Failure, FailureStage, fix_hint, is_retriable
from skyrl_agent.io import load_jsonl, save_jsonl
from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.policies.retry import PolicyError, PolicyHTTPError
from skyrl_agent.types import RolloutConfig, StopReason, Trajectory
from skyrl_gym.errors import ConfigError, MissingDependencyError, RegistrationError, SandboxError
from tests.agent.envs import EchoEnv, echo_items

OLD_FILE = Path(__file__).parent / "data" / "trajectories-2026-12-05.jsonl"
pytestmark = pytest.mark.usefixtures("echo_env")


def _play(policy, cfg, items, env_factory=None):
    """The engine's result of ``policy`` playing ``items`` (each env from ``env_factory``)."""
    return RolloutEngine(policy, cfg, env_factory=env_factory, progress=False).run_sync(items)


class _Flaky(Exception):
    retriable = True


@pytest.mark.parametrize(
    ("exc", "retriable"),
    [
        (TimeoutError("slow"), True),
        (ConnectionError("reset"), True),
        (OSError("docker daemon not reachable"), True),
        (SandboxError("container died"), True),
        (PolicyError("gave up after 4 attempts"), True),
        (PolicyHTTPError(503, "busy"), True),
        (PolicyHTTPError(429, "slow down"), True),
        (PolicyHTTPError(400, "bad request"), False),
        (FileNotFoundError("no such file"), False),
        (ModuleNotFoundError("No module named 'x'"), False),
        (MissingDependencyError("docker", "sandbox"), False),
        (RegistrationError("bad entry point"), False),
        (ConfigError("bad key"), False),
        (KeyError("answer"), False),
        (RuntimeError("an env bug"), False),
        (_Flaky("the exception says so"), True),
    ],
)
def test_retriable_by_kind(exc, retriable):
    failure = Failure.of(exc, "env", "env.step (turn 0)")
    assert failure.retriable is retriable == is_retriable(exc)
    assert failure.stage is FailureStage.ENV and failure.kind == type(exc).__name__
    assert failure.message.endswith("(in env.step (turn 0))")
    assert str(failure).startswith(f"{type(exc).__name__}: ")


def test_failure_dict_round_trip_and_bad_input():
    f = Failure(FailureStage.GRADE, "ValueError", "env.grade() returned nan", retriable=False)
    assert Failure.from_dict(f.to_dict()) == f
    with pytest.raises(ValueError, match="exactly the keys"):
        Failure.from_dict({"stage": "env", "kind": "X"})
    with pytest.raises(ValueError):
        Failure.from_dict({**f.to_dict(), "stage": "lunch"})


def test_an_env_bug_is_not_retried_and_a_lost_connection_is(tokenizer):
    def buggy(item):
        env = EchoEnv(extras={})
        env.step = lambda action: {}["answer"]  # a KeyError: the env's own bug
        return env

    cfg = RolloutConfig(max_turns=3, max_retries=2, concurrency=4)
    result = _play(ScriptedPolicy(tokenizer, ["a"]), cfg, echo_items(3), buggy)
    assert result.stats.retries == 0 and result.stats.masked == 3
    assert result.stats.failures == {"env/KeyError": 3}
    t = result.trajectories[0]
    assert t.failure == Failure(
        FailureStage.ENV, "KeyError", "'answer' (in env.step (turn 0))", retriable=False
    )
    assert t.error == str(t.failure) and t.stop_reason == StopReason.ENV_ERROR

    # a ConnectionError on the first turn of every try: retriable, so tried 1 + 2 times each
    result = _play(ScriptedPolicy(tokenizer, ["a"]), cfg, echo_items(2, crash_on=1))
    assert result.stats.retries == 4 and result.stats.failures == {"env/ConnectionError": 2}
    assert all(t.failure.retriable for t in result.trajectories)


def test_set_up_failures_name_their_stage(tokenizer):
    def missing_module(item):
        raise ModuleNotFoundError("No module named 'my_missing_dependency'")

    cfg = RolloutConfig(max_turns=2, max_retries=3)
    result = _play(ScriptedPolicy(tokenizer, ["a"]), cfg, echo_items(2), missing_module)
    assert result.stats.retries == 0 and result.stats.failures == {"setup/ModuleNotFoundError": 2}
    assert "in env set-up" in result.trajectories[0].error
    assert "install it" in fix_hint(result.trajectories[0].failure)

    class BadInit(EchoEnv):
        def init(self, prompt):
            raise ConnectionError("the database is not up yet")

    result = _play(
        ScriptedPolicy(tokenizer, ["a"]), RolloutConfig(max_retries=1), echo_items(1), lambda i: BadInit()
    )
    assert result.stats.retries == 1 and result.stats.failures == {"setup/ConnectionError": 1}


def test_policy_and_close_failures(tokenizer):
    policy = ScriptedPolicy(tokenizer, ["a"], fail_on={0})
    result = _play(policy, RolloutConfig(max_turns=2, max_retries=1), echo_items(1))
    t = result.trajectories[0]
    assert t.masked and t.stop_reason == StopReason.POLICY_ERROR
    assert (t.failure.stage, t.failure.kind, t.failure.retriable) == (
        FailureStage.POLICY,
        "RuntimeError",
        False,
    )
    assert result.stats.retries == 0

    class CloseFails(EchoEnv):
        def close(self):
            raise SandboxError("container could not be removed")

    result = _play(
        ScriptedPolicy(tokenizer, ["DONE"]), RolloutConfig(max_turns=2), echo_items(1), lambda i: CloseFails()
    )
    t = result.trajectories[0]
    assert not t.masked and t.reward == 1.0  # complete before the close: kept for training
    assert (t.failure.stage, t.failure.kind) == (FailureStage.CLOSE, "SandboxError")
    assert result.stats.failures == {"close/SandboxError": 1} and result.stats.masked == 0
    assert "close/SandboxError=1" in result.stats.table()


def test_failures_survive_files_and_old_files_load(tokenizer, tmp_path):
    cfg = RolloutConfig(max_turns=3, max_retries=0)
    trajs = _play(
        ScriptedPolicy(tokenizer, ["a"]), cfg, echo_items(1) + echo_items(1, crash_on=2)
    ).trajectories
    back = load_jsonl(save_jsonl(trajs, tmp_path / "t.jsonl"))
    assert back == trajs and back[1].failure.kind == "ConnectionError"

    # written by the code of 2026-12-05 (before failures were records): loads, counted by its text
    old = load_jsonl(OLD_FILE)
    assert [t.masked for t in old] == [False, True] and old[1].failure is None
    assert old[1].error.startswith("ConnectionError: sandbox went away")
    assert RolloutStats.of(old).failures == {"unknown/ConnectionError": 1}
    assert Trajectory.from_json(old[0].to_json()) == old[0]
