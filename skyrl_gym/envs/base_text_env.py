"""Import path of the published skyrl-gym API: ``from skyrl_gym.envs.base_text_env import ...``."""

from skyrl_gym.core import BaseTextEnv
from skyrl_gym.types import BaseTextEnvStepOutput, ConversationType, MessageType

__all__ = ["BaseTextEnv", "BaseTextEnvStepOutput", "ConversationType", "MessageType"]
