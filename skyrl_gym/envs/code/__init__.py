"""LiveCodeBench-style code envs: ``code`` (one turn) and ``code_multi_turn`` (with a python tool).

Programs run in a sandbox (:mod:`skyrl_gym.sandbox`, local by default, Docker optional); hidden
tests stay on the host. See :mod:`skyrl_gym.envs.code.env`.
"""

from skyrl_gym.envs.code.data import build_prompt, load_bundled_problems, load_bundled_rows, reference_of
from skyrl_gym.envs.code.env import (
    CodeEnv,
    CodeMultiTurnEnv,
    CodeTools,
    make_config,
    sandbox_limits,
    sandbox_spec,
)
from skyrl_gym.envs.code.grader import grade, outputs_match, values_match
from skyrl_gym.envs.code.parsing import extract_code, parse_tests
from skyrl_gym.envs.code.types import (
    CodeEnvConfig,
    CodeProblem,
    CodeTest,
    FailKind,
    GradeReport,
    TestKind,
    TestResult,
)
from skyrl_gym.sandbox import close_shared_pools

__all__ = [
    "CodeEnv",
    "CodeEnvConfig",
    "CodeMultiTurnEnv",
    "CodeProblem",
    "CodeTest",
    "CodeTools",
    "FailKind",
    "GradeReport",
    "TestKind",
    "TestResult",
    "build_prompt",
    "close_shared_pools",
    "extract_code",
    "grade",
    "load_bundled_problems",
    "load_bundled_rows",
    "make_config",
    "outputs_match",
    "parse_tests",
    "reference_of",
    "sandbox_limits",
    "sandbox_spec",
    "values_match",
]
