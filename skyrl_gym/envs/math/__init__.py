"""Math envs and the math answer checker."""

from skyrl_gym.envs.math.data import generate_problems, rows_from_gsm8k
from skyrl_gym.envs.math.grader import answers_equal, extract_boxed, extract_gsm8k_answer, parse_number

__all__ = [
    "answers_equal",
    "extract_boxed",
    "extract_gsm8k_answer",
    "generate_problems",
    "parse_number",
    "rows_from_gsm8k",
]
