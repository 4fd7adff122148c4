"""The published import path of the ``aime`` env: ``skyrl_gym.envs.aime.env:AIMEEnv``.

The env lives in :mod:`skyrl_gym.envs.math.aime`.
"""
