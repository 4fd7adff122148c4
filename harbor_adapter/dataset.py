"""Harbor tasks as rollout data: one row per task for the ``harbor`` env.

A row is what ``skyrl rollout --prompts`` and the trainers read::

    {"id": "fix-median", "env_id": "harbor", "prompt": [...system, user...],
     "env_config": {"max_turns": 20}, "extras": {"task_dir": "/abs/path/fix-median", "max_turns": 20}}

``max_turns`` should equal the runtime's (``--max-turns``), so that the env ends the episode and
runs the verifier at the latest on the last turn the runtime allows.

:func:`rollout_timeouts` gives the runtime deadlines that fit the tasks: an env call that
builds an image or runs a verifier takes longer than a tool call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harbor_adapter.env import task_prompt
from harbor_adapter.loader import load_tasks
from harbor_adapter.types import HarborTask, TrialSettings

__all__ = ["ENV_ID", "task_rows", "prompt_items", "rollout_timeouts", "rollout_plan"]

#: The registered id of :class:`~harbor_adapter.env.TerminalEnv`.
ENV_ID = "harbor"


def task_rows(tasks_dir: str | Path, *, max_turns: int = 20, **settings: Any) -> list[dict[str, Any]]:
    """One JSON-ready row per task at or below ``tasks_dir``; ``settings`` (``TrialSettings``
    fields such as ``command_timeout_s``) go into each row's ``env_config``."""
    TrialSettings(**settings)  # validate early
    rows = []
    for task in load_tasks(tasks_dir):
        rows.append(
            {
                "id": task.name,
                "env_id": ENV_ID,
                "prompt": task_prompt(task),
                "env_config": {"max_turns": max_turns, **settings},
                "extras": {"task_dir": str(task.path), "max_turns": max_turns},
            }
        )
    return rows


def prompt_items(
    tasks_dir: str | Path, *, max_turns: int = 20, limit: int | None = None, **settings: Any
) -> list:
    """The rows as :class:`skyrl_agent.engine.PromptItem` for a :class:`RolloutEngine`."""
    from skyrl_agent.engine import PromptItem

    rows = task_rows(tasks_dir, max_turns=max_turns, **settings)[:limit]
    return [
        PromptItem(row["env_id"], tuple(row["prompt"]), row["env_config"], row["extras"], row["id"])
        for row in rows
    ]


def rollout_timeouts(tasks: list[HarborTask], settings: TrialSettings | None = None) -> dict[str, float]:
    """``RolloutConfig`` deadlines that fit ``tasks``: ``env_step_timeout_s`` covers the
    container start (in ``init``), a command and the verifier; ``episode_deadline_s`` the
    whole trial."""
    s = settings or TrialSettings()
    build = max((s.build_timeout_s or t.config.environment.build_timeout_sec) for t in tasks)
    verifier = max((s.verifier_timeout_s or t.config.verifier.timeout_sec) for t in tasks)
    agent = max((s.agent_timeout_s or t.config.agent.budget_s) for t in tasks)
    step = max(build + s.start_timeout_s, verifier + 60, s.command_timeout_s + 30)
    return {
        "env_step_timeout_s": step,
        "episode_deadline_s": build + s.start_timeout_s + agent + verifier + 120,
    }


def rollout_plan(
    tasks_dir: str | Path, *, max_turns: int, limit: int | None = None, **settings: Any
) -> tuple[list, dict[str, float]]:
    """What ``skyrl harbor rollout TASKS_DIR`` plays: the prompt items (the env's
    ``max_turns`` equal to the runtime's, so the verifier runs on the last turn at the latest)
    and the ``RolloutConfig`` step deadline that fits the tasks' builds and verifiers."""
    items = prompt_items(tasks_dir, max_turns=max_turns, limit=limit, **settings)
    tasks = load_tasks(tasks_dir)
    timeouts = rollout_timeouts(tasks, TrialSettings(**settings))
    return items, {"env_step_timeout_s": timeouts["env_step_timeout_s"]}
