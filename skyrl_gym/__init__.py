"""skyrl_gym: the environment SDK.

Subclass :class:`BaseTextEnv`, register it, give it tools with :func:`tool`, and check it with
:func:`check_env`. This package imports no torch.
"""

from skyrl_gym import (
    envs,  # registers the built-in envs
    error,
    tools,
)
from skyrl_gym.checker import check_env
from skyrl_gym.config import ConfigView, config_get
from skyrl_gym.core import BaseTextEnv, Env
from skyrl_gym.errors import (
    ConfigError,
    EnvContractError,
    EnvNotFoundError,
    MissingDependencyError,
    RegistrationError,
    SkyRLError,
)
from skyrl_gym.registration import (
    EnvSpec,
    deregister,
    list_envs,
    make,
    pprint_registry,
    register,
    registry,
    spec,
)
from skyrl_gym.tools import ToolGroup, tool
from skyrl_gym.types import BaseTextEnvStepOutput, ConversationType, EnvExample, MessageType

__version__ = "0.1.0"

__all__ = [
    "BaseTextEnv",
    "BaseTextEnvStepOutput",
    "ConfigError",
    "ConfigView",
    "ConversationType",
    "Env",
    "EnvContractError",
    "EnvExample",
    "EnvNotFoundError",
    "EnvSpec",
    "MessageType",
    "MissingDependencyError",
    "RegistrationError",
    "SkyRLError",
    "ToolGroup",
    "check_env",
    "config_get",
    "deregister",
    "envs",
    "error",
    "list_envs",
    "make",
    "pprint_registry",
    "register",
    "registry",
    "spec",
    "tool",
    "tools",
]
