"""Tools: the ``@tool`` decorator and ``ToolGroup`` (published skyrl-gym API).

Minimal first version: published semantics only. Schemas, validation and parsers come next.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skyrl_gym.errors import ToolNotFoundError, did_you_mean

__all__ = ["tool", "ToolGroup"]


class tool:  # noqa: N801 - the published API spells it in lower case
    """Mark a method of a :class:`ToolGroup` (or a function) as a tool named after it."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return self.func.__get__(instance, owner)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)


class ToolGroup:
    """A named set of tools: every ``@tool`` method of a subclass."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tool_registry: dict[str, Callable[..., Any]] = {}
        for cls in reversed(type(self).__mro__):
            for attr, value in vars(cls).items():
                if isinstance(value, tool):
                    self._tool_registry[value.name] = getattr(self, attr)

    def get_name(self) -> str:
        return self.name

    def get_tool(self, name: str) -> Callable[..., Any] | None:
        return self._tool_registry.get(name)

    def get_tool_names(self) -> list[str]:
        return list(self._tool_registry)

    def execute_tool(self, name: str, *args: Any, **kwargs: Any) -> Any:
        fn = self._tool_registry.get(name)
        if fn is None:
            raise ToolNotFoundError(
                f"tool group {self.name!r} has no tool {name!r}; it has {self.get_tool_names()}."
                + did_you_mean(name, self._tool_registry)
            )
        return fn(*args, **kwargs)

    def get_tool_to_group_mapping(self) -> dict[str, str]:
        return {name: self.name for name in self._tool_registry}

    def tool_specs(self) -> list[dict[str, Any]]:
        return []
