"""Multi-step Harbor tasks with real Docker: one container walks the steps, each step's
instruction arrives as an observation, each step's reward sits on its last turn, and the turn
rewards add up to the task's reward by its strategy."""

from __future__ import annotations

import math

import pytest

from harbor_adapter import bundled_tasks_dir, load_task
from harbor_adapter.agents import nop_actions, oracle_actions, run_scripted
from harbor_adapter.env import TerminalEnv, tool_call
from harbor_adapter.errors import TrialError
from tests.harbor.conftest import TOML

pytestmark = pytest.mark.docker

SUBMIT = tool_call("submit")


def bash(command: str) -> str:
    return tool_call("bash", command=command)


def play(task_dir, actions, **config):
    """Play ``actions`` in a fresh env of the task: (step outputs, metrics)."""
    env = TerminalEnv({"max_turns": 10, **config}, {"task_dir": str(task_dir)})
    try:
        messages, _ = env.init(None)
        outs = []
        for action in actions:
            outs.append(env.step(action))
            if outs[-1].done:
                break
        return messages, outs, env.get_metrics()
    finally:
        env.close()


def test_the_bundled_task_walks_its_steps_in_one_container(base_images):
    task = load_task(bundled_tasks_dir() / "order-steps")
    steps = task.steps
    messages, outs, metrics = play(task.path, oracle_actions(task))
    assert messages[-1]["content"] == steps[0].instruction
    assert outs[-1].done and metrics["steps_run"] == 3 and metrics["solved"]
    ends = [o for o in outs if "step" in o.metadata]
    assert [o.metadata["step"]["name"] for o in ends] == ["totals", "by-customer", "report"]
    # the next step's instruction is the observation after a step ends
    assert steps[1].instruction in ends[0].observations[0]["content"]
    assert "Step 3 of 3" in ends[1].observations[0]["content"]
    # mean: each step's reward over three on its last turn; every other turn 0; the sum is 1
    assert [o.reward for o in outs if "step" not in o.metadata] == [0.0] * (len(outs) - 3)
    assert [round(o.reward, 9) for o in ends] == [round(1 / 3, 9)] * 3
    assert math.isclose(sum(o.reward for o in outs), 1.0)
    assert ends[1].metadata["step"]["metrics"] == {"reward": 1.0, "total_ok": 1.0, "by_customer_ok": 1.0}


def test_the_gate_stops_after_a_failed_step(base_images):
    task = load_task(bundled_tasks_dir() / "order-steps")
    _, outs, metrics = play(task.path, nop_actions(task))
    assert len(outs) == 1 and outs[0].done and outs[0].reward == 0.0
    assert "step 'totals': reward=0 is below min_reward 1" in outs[0].metadata["stopped"]
    assert metrics["steps_run"] == 1 and not metrics["solved"]


def test_a_later_step_sees_the_work_not_the_tests(base_images):
    """Step 2 starts after step 1's shared verifier: its tests and reward are gone, step 2's
    workdir/setup.sh has run, and step 1's files are still there."""
    task = load_task(bundled_tasks_dir() / "order-steps")
    step1 = oracle_actions(task)[: oracle_actions(task).index(SUBMIT) + 1]
    look = bash("ls -A /tests /logs/verifier; wc -l < /app/orders.csv; cat /app/total.txt")
    _, outs, _ = play(task.path, [*step1, look])
    seen = outs[-1].observations[0]["content"]
    assert "lib.sh" not in seen and "reward" not in seen and "test.sh" not in seen
    assert "7\n42.75" in seen  # setup.sh appended two orders; step 1's total is still there


def test_the_last_steps_separate_verifier_is_not_fooled(base_images):
    """Step 3 of order-steps is checked in a fresh container: a cat that prints the expected
    report fools the shared verifier, not the separate one."""
    task = load_task(bundled_tasks_dir() / "order-steps")
    oracle = oracle_actions(task)
    first_two = oracle[: [i for i, a in enumerate(oracle) if a == SUBMIT][1] + 1]
    fake_cat = bash(
        "printf '#!/bin/sh\\nprintf \"Total: 54.00\\\\nTop customer: cy\\\\n\"\\n' > /tmp/c && "
        'chmod +x /tmp/c && cp /tmp/c "$(command -v cat)"'
    )
    forged = [*first_two, fake_cat, SUBMIT]
    assert run_scripted(task, forged, agent="forger").reward == pytest.approx(2 / 3)
    shared = run_scripted(task, forged, agent="forger", env_config={"verifier_mode": "shared"})
    assert shared.reward == pytest.approx(1.0)


# the fixture's task (tests/harbor/conftest.py), in two steps; only the last one counts
FINAL_TOML = (
    'multi_step_reward_strategy = "final"\n'
    + TOML
    + """
[[steps]]
name = "a"
artifacts = ["/app/a.txt"]
[steps.verifier]
environment_mode = "separate"

[[steps]]
name = "b"
"""
)


def _steps_task(make_task, name, toml, files):
    root = make_task(name, toml=toml)
    for rel, text in files.items():
        p = root / "steps" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_a_separate_verifier_mid_task_keeps_the_agents_container(make_task):
    """Step a is checked in a container of its own; step b goes on in the agent's container
    (a file step a's verifier never saw is still there). ``final``: only the last step counts."""
    reward_if = (
        "if {}; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
    )
    root = _steps_task(
        make_task,
        "final",
        FINAL_TOML,
        {
            "a/instruction.md": "Write a.\n",
            "a/tests/test.sh": reward_if.format("[ -f /app/a.txt ] && [ ! -e /app/private ]"),
            "b/instruction.md": "Write b.\n",
            "b/tests/test.sh": reward_if.format("[ -f /app/b.txt ] && [ -f /app/private ]"),
        },
    )
    task = load_task(root)
    actions = [
        bash("mkdir -p /app && touch /app/a.txt /app/private"),
        SUBMIT,
        bash("touch /app/b.txt"),
        SUBMIT,
    ]
    _, outs, metrics = play(root, actions)
    ends = [o for o in outs if "step" in o.metadata]
    assert [o.metadata["step"]["reward"] for o in ends] == [1.0, 1.0]
    assert [o.reward for o in ends] == [0.0, 1.0] and metrics["steps_run"] == 2
    # a step 'a' failure does not gate (no min_reward), and 'final' scores the last step only
    assert (
        run_scripted(task, [SUBMIT, bash("mkdir -p /app && touch /app/b.txt /app/private"), SUBMIT]).reward
        == 1.0
    )
    assert run_scripted(task, [actions[0], SUBMIT, SUBMIT]).reward == 0.0


def test_a_failing_setup_masks_the_episode(make_task):
    root = _steps_task(
        make_task,
        "badsetup",
        FINAL_TOML.replace('multi_step_reward_strategy = "final"\n', ""),
        {
            "a/instruction.md": "A.\n",
            "b/instruction.md": "B.\n",
            "b/workdir/setup.sh": "echo cannot prepare >&2; exit 3\n",
        },
    )
    task = load_task(root)
    outcome = run_scripted(task, [SUBMIT, SUBMIT])
    assert outcome.reward is None and "TrialError" in outcome.error and "setup.sh exited 3" in outcome.error
    assert "cannot prepare" in outcome.error
    env = TerminalEnv({"max_turns": 3}, {"task_dir": str(root)})
    try:
        env.init(None)
        with pytest.raises(TrialError, match="step 'b': workdir/setup.sh exited 3"):
            env.step(SUBMIT)
    finally:
        env.close()


def test_steps_the_turns_never_reached_count_zero(base_images):
    """max_turns covers the whole episode: when it runs out in step 1, step 1 is checked and the
    episode ends; the two steps never reached count 0 in the mean (stopping early must not pay)."""
    task = load_task(bundled_tasks_dir() / "order-steps")
    step1 = oracle_actions(task)[:2]  # write solve.sh and run it; no submit
    _, outs, metrics = play(task.path, step1, max_turns=2)
    assert outs[-1].done and metrics["steps_run"] == 1 and metrics["step/totals/reward"] == 1.0
    assert "max_turns=2 ran out in step 'totals'" in outs[-1].metadata["stopped"]
    assert sum(o.reward for o in outs) == pytest.approx(1 / 3)
