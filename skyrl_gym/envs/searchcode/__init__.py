"""``searchcode``: the published skyrl-gym multi-tool env (search and python), on our tools.

See :mod:`skyrl_gym.envs.searchcode.env`.
"""

from skyrl_gym.envs.searchcode.env import SearchCodeConfig, SearchCodeEnv, strict_gsm8k_answer

__all__ = ["SearchCodeConfig", "SearchCodeEnv", "strict_gsm8k_answer"]
