"""Import path of the published skyrl-gym registry: ``from skyrl_gym.envs.registration import ...``.

The registry itself is :mod:`skyrl_gym.registration`; this module names the same objects."""

from skyrl_gym.registration import (
    EnvSpec,
    deregister,
    list_envs,
    load_env_creator,
    make,
    pprint_registry,
    register,
    registry,
    spec,
)

__all__ = [
    "EnvSpec",
    "deregister",
    "list_envs",
    "load_env_creator",
    "make",
    "pprint_registry",
    "register",
    "registry",
    "spec",
]
