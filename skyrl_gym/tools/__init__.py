"""Tools for envs: ``@tool``, ``ToolGroup``."""

from skyrl_gym.tools.core import ToolGroup, tool

__all__ = ["tool", "ToolGroup"]
