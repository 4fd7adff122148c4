"""``from skyrl_gym.envs.aime.env import AIMEEnv`` (the published path); see :mod:`skyrl_gym.envs.math.aime`."""

from skyrl_gym.envs.math.aime import AIMEEnv

__all__ = ["AIMEEnv"]
