"""``skyrl harbor check``: prove every task of a folder sound before training on it.

A task passes when its oracle (``solution/solve.sh``) scores 1 and the do-nothing agent scores
0, both run through the same :class:`~harbor_adapter.env.TerminalEnv` a model would use. A task
that does not load, whose image does not build, or whose verifier leaves no usable reward fails,
with the reason.

A task whose verifier shares the agent's container but that declares ``artifacts`` is also run
with a separate verifier: an oracle that passes only in the shared container fails the check,
since its pass rests on something the agent can change there (a replaced ``python3`` or test
runner, a file that is not an artifact), and a model trained on it could learn to do the same.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harbor_adapter.agents import nop_actions, oracle_actions, run_scripted
from harbor_adapter.errors import HarborTaskError
from harbor_adapter.loader import find_task_dirs, load_task
from harbor_adapter.types import TrialOutcome, TrialSettings, VerifierMode

__all__ = ["TaskCheck", "check_task", "check_tasks", "format_table"]


@dataclass(frozen=True)
class TaskCheck:
    """The verdict on one task."""

    task: str
    """Task name (the folder's name when the task does not load)."""
    path: str
    """Task folder."""
    oracle: TrialOutcome | None = None
    """The oracle's trial (None when the task did not load)."""
    nop: TrialOutcome | None = None
    """The do-nothing agent's trial."""
    oracle_separate: TrialOutcome | None = None
    """The oracle again with a separate verifier (shared-verifier tasks with artifacts only)."""
    load_error: str | None = None
    """Why the task did not load."""
    seconds: float = 0.0
    """Wall-clock seconds for both trials."""
    reasons: tuple[str, ...] = field(default=())
    """Why the task fails; empty when it passes."""

    @property
    def passed(self) -> bool:
        """The oracle scored 1 and the do-nothing agent 0."""
        return not self.reasons

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON)."""
        return {
            "task": self.task,
            "path": self.path,
            "passed": self.passed,
            "reasons": list(self.reasons),
            "oracle": self.oracle.to_dict() if self.oracle else None,
            "nop": self.nop.to_dict() if self.nop else None,
            "oracle_separate": self.oracle_separate.to_dict() if self.oracle_separate else None,
            "load_error": self.load_error,
            "seconds": round(self.seconds, 3),
        }


def _reasons(oracle: TrialOutcome, nop: TrialOutcome) -> tuple[str, ...]:
    out = []
    if oracle.error:
        out.append(f"oracle: {oracle.error}")
    elif oracle.reward is None or not math.isclose(oracle.reward, 1.0):
        out.append(f"oracle scored {oracle.reward!r}, expected 1")
    if nop.error:
        out.append(f"do-nothing agent: {nop.error}")
    elif nop.reward is None or not math.isclose(nop.reward, 0.0, abs_tol=1e-9):
        out.append(f"do-nothing agent scored {nop.reward!r}, expected 0")
    return tuple(out)


def check_task(path: str | Path, settings: TrialSettings | None = None) -> TaskCheck:
    """Load one task and run its oracle and do-nothing trials."""
    start = time.monotonic()
    try:
        task = load_task(path)
        oracle_turns = oracle_actions(task)
    except HarborTaskError as exc:
        return TaskCheck(
            Path(path).name,
            str(path),
            load_error=f"{type(exc).__name__}: {exc}",
            seconds=time.monotonic() - start,
            reasons=(f"does not load: {exc}",),
        )
    settings = settings or TrialSettings()
    config: dict[str, Any] = {k: v for k, v in asdict(settings).items() if v is not None}
    oracle = run_scripted(task, oracle_turns, agent="oracle", env_config=config)
    nop = run_scripted(task, nop_actions(task), agent="nop", env_config=config)
    reasons = list(_reasons(oracle, nop))
    separate = None
    if (
        not reasons
        and task.config.artifacts
        and task.config.verifier_mode(settings.verifier_mode) is VerifierMode.SHARED
    ):
        separate = run_scripted(
            task, oracle_turns, agent="oracle/separate", env_config={**config, "verifier_mode": "separate"}
        )
        if separate.error or separate.reward is None or not math.isclose(separate.reward, 1.0):
            reasons.append(
                f"the oracle passes only with the verifier in the agent's container: a separate verifier, "
                f"which sees only the artifacts, scores it {_score(separate)}; the tests trust something the "
                "agent can change there (a replaced binary, a file that is not an artifact)"
            )
    return TaskCheck(
        task.name,
        str(task.path),
        oracle,
        nop,
        oracle_separate=separate,
        seconds=time.monotonic() - start,
        reasons=tuple(reasons),
    )


def check_tasks(
    root: str | Path,
    settings: TrialSettings | None = None,
    *,
    jobs: int = 1,
    on_result: Callable[[TaskCheck], None] | None = None,
) -> list[TaskCheck]:
    """Check every task at or below ``root``, ``jobs`` at a time; results in path order."""
    dirs = find_task_dirs(root)
    if jobs <= 1:
        results = []
        for d in dirs:
            results.append(check_task(d, settings))
            if on_result:
                on_result(results[-1])
        return results
    with ThreadPoolExecutor(jobs, thread_name_prefix="harbor-check") as pool:
        futures = [pool.submit(check_task, d, settings) for d in dirs]
        results = []
        for fut in futures:
            results.append(fut.result())
            if on_result:
                on_result(results[-1])
        return results


def _score(outcome: TrialOutcome | None) -> str:
    if outcome is None:
        return "-"
    if outcome.error:
        return "error"
    return f"{outcome.reward:g}"


def format_table(results: list[TaskCheck]) -> str:
    """A plain-text table: task, oracle score, do-nothing score, seconds, verdict and reason."""
    rows = [("task", "oracle", "nop", "seconds", "result")]
    for r in results:
        verdict = "PASS" if r.passed else "FAIL: " + "; ".join(r.reasons)
        rows.append((r.task, _score(r.oracle), _score(r.nop), f"{r.seconds:.1f}", verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
        for row in rows
    ]
    passed = sum(r.passed for r in results)
    lines.append(f"{passed}/{len(results)} tasks pass")
    return "\n".join(lines)
