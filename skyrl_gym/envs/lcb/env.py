"""``from skyrl_gym.envs.lcb.env import LCBEnv`` (the published path); see :mod:`skyrl_gym.envs.code.lcb`."""

from skyrl_gym.envs.code.lcb import LCBEnv

__all__ = ["LCBEnv"]
