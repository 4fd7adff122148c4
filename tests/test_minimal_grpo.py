"""Smoke runs of ``examples/minimal_grpo.py`` at tiny size, in a subprocess, and its length."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "minimal_grpo.py"

# registers a test env (tests/envs_for_tests.py) in the subprocess, then runs the example as a script
BOOT = """
import runpy, sys, skyrl_gym
skyrl_gym.register("test-logs", "tests.envs_for_tests:LogsEnv")
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
STEP = re.compile(
    r"^step (\d+)/(\d+)  reward ([\d.]+)  success ([\d.]+)  groups with signal (\d+)/(\d+)  "
    r"(?:trained (\d+) episodes, (\d+) tokens  loss ([-+\d.]+)  grad_norm ([\d.]+)|no update)",
    re.M,
)
EVAL = re.compile(r"^eval (before|after): success ([\d.]+) \+/- ([\d.]+) \((\d+) episodes\)$", re.M)
FINAL = re.compile(
    r"^held-out success: before ([\d.]+) \+/- ([\d.]+), after ([\d.]+) \+/- ([\d.]+) \((.+)\)$", re.M
)
TINY = ["--prompts-per-step", "2", "--group-size", "2", "--eval-prompts", "2", "--eval-samples", "2"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from skyrl_agent.models import tiny_random_model

    out = tmp_path_factory.mktemp("tiny-model")
    model, tokenizer = tiny_random_model(hidden_size=64, num_layers=2)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def _run(args: list[str]) -> str:
    cmd = [sys.executable, "-c", BOOT, str(SCRIPT), *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _check_evals(out: str, episodes: int) -> None:
    evals = EVAL.findall(out)
    assert [e[0] for e in evals] == ["before", "after"], out
    assert all(int(e[3]) == episodes for e in evals)
    final = FINAL.search(out)
    assert final is not None, out
    before, after = float(final.group(1)), float(final.group(3))
    assert (before, after) == (float(evals[0][1]), float(evals[1][1]))
    assert 0.0 <= before <= 1.0 and 0.0 <= after <= 1.0


@pytest.mark.slow
def test_calculator_default_env(tiny_model: str) -> None:
    """The default env (the two-turn calculator) end to end: a random model earns no reward, so
    every group is flat and no step updates, but rollouts and both evaluations run."""
    out = _run(["--model", tiny_model, "--steps", "2", "--max-tokens-per-turn", "8", *TINY])
    steps = STEP.findall(out)
    assert [(s[0], s[1]) for s in steps] == [("1", "2"), ("2", "2")], out
    assert all(s[5] == "2" for s in steps)
    _check_evals(out, episodes=4)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra", [[], ["--sampler-copy", "--updates-per-step", "2"]], ids=["shared-sampler", "sampler-copy"]
)
def test_multi_turn_update(tiny_model: str, extra: list[str]) -> None:
    """A four-turn env whose final reward is a coin flip for a random model: groups get mixed
    rewards (groups of 4: all four alike 1 time in 8), so steps update. Only the model's own tokens are trained: at most 4 turns x 6 tokens
    per episode, while each observation alone is about 70 tokens."""
    args = ["--env", "test-logs", "--model", tiny_model, "--steps", "2", "--max-turns", "4"]
    out = _run([*args, "--max-tokens-per-turn", "6", *TINY, "--group-size", "4", *extra])
    steps = STEP.findall(out)
    assert len(steps) == 2, out
    updated = [s for s in steps if s[6]]
    assert updated, f"no step had a group with signal:\n{out}"
    for s in updated:
        episodes, tokens = int(s[6]), int(s[7])
        assert 0 < tokens <= episodes * 4 * 6, s  # observations (about 70 tokens each) not trained
        assert float(s[9]) > 0.0  # a gradient flowed
    _check_evals(out, episodes=4)


def test_stays_short() -> None:
    """The point of the file is that one can read all of it: about 200 lines at most."""
    lines = SCRIPT.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 220, f"examples/minimal_grpo.py has {len(lines)} lines; keep it at most ~220"
