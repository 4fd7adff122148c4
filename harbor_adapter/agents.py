"""Scripted agents for checking tasks: the oracle and the do-nothing agent.

Both act only through the :class:`~harbor_adapter.env.TerminalEnv` tools, exactly as a model's
turns would: same container profile, limits, per-command deadlines and agent budget. The oracle
writes the task's ``solution/`` files with ``write_file`` (text) or ``bash`` (binary, as
base64) into ``/solution`` and runs ``solve.sh`` with one ``bash`` call, as Harbor's oracle
does; so a solution that hangs, floods output or leaves processes behind meets the same harness
a model would.
"""

from __future__ import annotations

import base64
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harbor_adapter.env import TerminalEnv, tool_call
from harbor_adapter.errors import TaskFileMissingError, TrialError
from harbor_adapter.types import HarborTask, TrialOutcome
from skyrl_gym.errors import SkyRLError

__all__ = ["oracle_actions", "nop_actions", "run_scripted", "SOLUTION_DIR", "AGENTS"]

SOLUTION_DIR = "/solution"


def _solution_turns(task: HarborTask, root: Path, *, clear: bool = False) -> list[str]:
    """Write ``root`` (a ``solution/`` folder) into ``/solution`` (emptied first with ``clear``)
    and run its ``solve.sh``."""
    turns = [tool_call("bash", command=f"rm -rf {SOLUTION_DIR}")] if clear else []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        target = f"{SOLUTION_DIR}/{path.relative_to(root).as_posix()}"
        data = path.read_bytes()
        try:
            turns.append(tool_call("write_file", path=target, content=data.decode("utf-8")))
        except UnicodeDecodeError:
            b64 = base64.b64encode(data).decode()
            quoted = shlex.quote(target)
            turns.append(
                tool_call(
                    "bash", command=f"mkdir -p $(dirname {quoted}) && echo {b64} | base64 -d > {quoted}"
                )
            )
    env_prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in task.config.solution.env.items())
    run = (
        f"chmod +x {SOLUTION_DIR}/solve.sh && {env_prefix + ' ' if env_prefix else ''}{SOLUTION_DIR}/solve.sh"
    )
    turns.append(tool_call("bash", command=run))
    return turns


def oracle_actions(task: HarborTask) -> list[str]:
    """The oracle's turns: write ``solution/`` into ``/solution``, run ``solve.sh``, submit. For
    a multi-step task, so for each step in turn, from the step's ``solution/`` (the task's when
    the step has none)."""
    if not task.steps:
        if not (task.solution_dir / "solve.sh").is_file():
            raise TaskFileMissingError(f"{task.path}: no solution/solve.sh (the oracle)")
        return [*_solution_turns(task, task.solution_dir), tool_call("submit")]
    turns = []
    for i, step in enumerate(task.steps):
        root = step.solution_dir if step.solution_dir.is_dir() else task.solution_dir
        if not (root / "solve.sh").is_file():
            raise TaskFileMissingError(
                f"{task.path}: step {step.name!r} has no oracle: neither steps/{step.name}/solution/solve.sh "
                "nor solution/solve.sh"
            )
        turns += [*_solution_turns(task, root, clear=i > 0), tool_call("submit")]
    return turns


def nop_actions(task: HarborTask) -> list[str]:
    """The do-nothing agent: submit at once (the task's initial state must score 0), at every
    step of a multi-step task."""
    return [tool_call("submit")] * max(len(task.steps), 1)


#: Scripted agents by name.
AGENTS: dict[str, Callable[[HarborTask], list[str]]] = {"oracle": oracle_actions, "nop": nop_actions}


def run_scripted(
    task: HarborTask,
    actions: Sequence[str],
    *,
    agent: str = "scripted",
    env_config: dict | None = None,
) -> TrialOutcome:
    """Play ``actions`` as the model's turns in a fresh :class:`TerminalEnv` of ``task`` and
    return the outcome: the reward, or the error that stands in for it (never a made-up 0).

    The last action should end the episode (``submit``); if none does, the verifier runs after
    the last one anyway."""
    start = time.monotonic()
    config = dict(env_config or {})
    config.setdefault("max_turns", max(len(actions), 1))
    env = TerminalEnv(config, {"task_dir": str(task.path)})
    reward: float | None = None
    error: str | None = None
    metrics: dict = {}
    try:
        env.init(None)
        done = False
        for action in actions:
            out = env.step(action)
            if out.done:
                reward, done = float(out.reward), True
                break
        if not done:
            result = env.finish()
            reward, error = result.reward, result.error
    except (SkyRLError, TrialError) as exc:
        error = f"{type(exc).__name__}: {exc}"
        reward = None
    finally:
        try:
            metrics = {**env.get_metrics(), **env.timings()}
        finally:
            env.close()
    if env.verifier is not None and env.verifier.error is None and error is None:
        reward = env.verifier.reward
    return TrialOutcome(task.name, agent, reward, error, time.monotonic() - start, metrics)
