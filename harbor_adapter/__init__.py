"""Harbor tasks in this stack: load and validate task folders, run trials in Docker, give a
model a terminal (the ``harbor`` env), and check tasks with their oracle.

::

    from harbor_adapter import load_tasks, check_tasks, bundled_tasks_dir
    tasks = load_tasks(bundled_tasks_dir())
    results = check_tasks(bundled_tasks_dir())          # or: skyrl harbor check DIR

The ``harbor`` env is registered through the ``skyrl_gym.envs`` entry point (and, for
checkouts without an installed entry point, when this package is imported).
"""

from harbor_adapter.check import TaskCheck, check_tasks
from harbor_adapter.errors import (
    HarborTaskError,
    ImageBuildError,
    RewardError,
    TaskConfigError,
    TaskFileMissingError,
    TrialError,
    TrialTimeoutError,
    UnsupportedTaskError,
)
from harbor_adapter.loader import bundled_tasks_dir, find_task_dirs, load_task, load_tasks, parse_task_config
from harbor_adapter.types import (
    HarborTask,
    NetworkMode,
    TaskConfig,
    TrialOutcome,
    TrialSettings,
    VerifierResult,
)

__all__ = [
    "HarborTask",
    "HarborTaskError",
    "ImageBuildError",
    "NetworkMode",
    "RewardError",
    "TaskConfig",
    "TaskConfigError",
    "TaskCheck",
    "TaskFileMissingError",
    "TrialError",
    "TrialOutcome",
    "TrialSettings",
    "TrialTimeoutError",
    "UnsupportedTaskError",
    "VerifierResult",
    "bundled_tasks_dir",
    "check_tasks",
    "find_task_dirs",
    "load_task",
    "load_tasks",
    "parse_task_config",
    "register_env",
]

ENTRY_POINT = "harbor_adapter.env:TerminalEnv"


def register_env() -> None:
    """Register the ``harbor`` env unless it is registered already (idempotent)."""
    from skyrl_gym.registration import register, registry

    if "harbor" not in registry:
        register(
            "harbor",
            ENTRY_POINT,
            description="Harbor tasks with a terminal (bash, files) in Docker; reward from the task's verifier",
            source="plugin:harbor_adapter",
        )


register_env()
