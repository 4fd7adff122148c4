"""SWE-style repository repair: SWE-bench instances, offline images, grading, the ``swe`` env.

::

    from skyrl_gym.envs.swe import bundled_instances, grade_patch
    inst = bundled_instances()[0]
    grade_patch(inst, inst.patch).resolved      # True: the gold patch resolves its task

See ``docs/guides/swe.md`` and ``docs/decisions/0013-swe-env.md``.
"""

from skyrl_gym.envs.swe.grading import GradingSetupError, grade_patch
from skyrl_gym.envs.swe.instances import BUNDLED_TASKS, bundled_instances, instance_from_row, load_instances
from skyrl_gym.envs.swe.log_parsers import get_log_parser, list_log_parsers, register_log_parser
from skyrl_gym.envs.swe.patches import filter_patch, protected_reason, split_patch
from skyrl_gym.envs.swe.types import GradeReport, SWEEnvConfig, SWEInstance, TestResult, TestStatus

__all__ = [
    "BUNDLED_TASKS",
    "GradeReport",
    "GradingSetupError",
    "SWEEnvConfig",
    "SWEInstance",
    "TestResult",
    "TestStatus",
    "bundled_instances",
    "filter_patch",
    "get_log_parser",
    "grade_patch",
    "instance_from_row",
    "list_log_parsers",
    "load_instances",
    "protected_reason",
    "register_log_parser",
    "split_patch",
]
