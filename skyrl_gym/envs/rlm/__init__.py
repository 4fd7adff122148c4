"""Recursive Language Model envs: the model answers by programming a persistent, sandboxed
Python REPL that holds the task's context. ``rlm`` grades the final answer by exact match.

See :mod:`skyrl_gym.envs.rlm.env` for the episode and how it differs from the published
package, and :mod:`skyrl_gym.envs.rlm.repl` for the REPL's worker process.
"""

from skyrl_gym.envs.rlm.env import (
    DEFAULT_RLM_SYSTEM_PROMPT,
    BaseRLMEnv,
    RLMEnv,
    make_config,
    normalize_answer,
)
from skyrl_gym.envs.rlm.repl import SandboxREPL, lm_functions
from skyrl_gym.envs.rlm.types import REPLResult, RLMConfig

__all__ = [
    "BaseRLMEnv",
    "RLMEnv",
    "RLMConfig",
    "REPLResult",
    "SandboxREPL",
    "DEFAULT_RLM_SYSTEM_PROMPT",
    "lm_functions",
    "make_config",
    "normalize_answer",
]
