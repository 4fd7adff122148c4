"""Envs that call a model: ``judge_qa`` (an LLM judge gives the reward) and ``ask_user`` (a
simulated user gives the user turns), both through LiteLLM.

Judge failures are infrastructure failures (:class:`JudgeError`), recorded and raised, never a
reward of 0. ``judge="exact"`` grades offline by string match.
"""

from skyrl_gym.envs.judge.data import load_bundled_rows, make_row
from skyrl_gym.envs.judge.env import JudgeQAEnv, judge_config_from
from skyrl_gym.envs.judge.judges import (
    RUBRIC,
    ExactJudge,
    Judge,
    LiteLLMJudge,
    build_messages,
    make_judge,
    parse_verdict,
)
from skyrl_gym.envs.judge.simulated_user import AskUserEnv, generate_ask_user_rows, scripted_reply
from skyrl_gym.envs.judge.types import (
    JudgeConfig,
    JudgeError,
    JudgeErrorKind,
    LLMCallError,
    LLMErrorKind,
    SimulatedUserConfig,
    SimulatedUserError,
    Verdict,
)

__all__ = [
    "RUBRIC",
    "AskUserEnv",
    "LLMCallError",
    "LLMErrorKind",
    "SimulatedUserConfig",
    "SimulatedUserError",
    "generate_ask_user_rows",
    "scripted_reply",
    "ExactJudge",
    "Judge",
    "JudgeConfig",
    "JudgeError",
    "JudgeErrorKind",
    "JudgeQAEnv",
    "LiteLLMJudge",
    "Verdict",
    "build_messages",
    "judge_config_from",
    "load_bundled_rows",
    "make_judge",
    "make_row",
    "parse_verdict",
]
