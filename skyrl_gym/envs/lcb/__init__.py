"""The published import path of the ``lcb`` env: ``skyrl_gym.envs.lcb.env:LCBEnv``.

The env lives in :mod:`skyrl_gym.envs.code.lcb`.
"""
