"""``@tool`` and ``ToolGroup``: turn Python functions and methods into tools a model can call.

::

    from skyrl_gym.tools import ToolGroup, tool

    class Calculator(ToolGroup):
        def __init__(self):
            super().__init__(name="calculator")

        @tool
        def add(self, a: int, b: int) -> int:
            \"\"\"Add two integers.

            Args:
                a: The first addend.
                b: The second addend.
            \"\"\"
            return a + b

    Calculator().tool_specs()   # the OpenAI ``tools=`` list, schema from the type hints

The published skyrl-gym API (``ToolGroup(name)``, ``get_name``, ``get_tool``,
``get_tool_names``, ``execute_tool``, ``get_tool_to_group_mapping``, ``@tool`` without
annotations) keeps working exactly. The schema is built at decoration time: an unannotated
parameter gives a permissive schema and a :class:`~skyrl_gym.tools.types.ToolSchemaWarning`; in
strict mode (``@tool(strict=True)``, :func:`set_strict`, or ``SKYRL_TOOLS_STRICT=1``) it is a
:class:`~skyrl_gym.errors.ToolDefinitionError`.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from skyrl_gym.errors import ToolDefinitionError, ToolNotFoundError, did_you_mean
from skyrl_gym.tools import _run
from skyrl_gym.tools._schema import ToolSignature, build_signature
from skyrl_gym.tools.types import ToolContext

__all__ = ["tool", "Tool", "ToolGroup", "set_strict", "is_strict", "STRICT_ENV_VAR"]

STRICT_ENV_VAR = "SKYRL_TOOLS_STRICT"
"""Set to ``1`` to make every ``@tool`` strict (unannotated parameters become errors)."""

_strict_override: bool | None = None
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class _Unset:
    def __repr__(self) -> str:
        return "<inherit>"


_UNSET: Any = _Unset()


def set_strict(enabled: bool | None) -> bool | None:
    """Make every later ``@tool`` strict (True), lenient (False), or follow ``SKYRL_TOOLS_STRICT``
    (None, the default). Returns the previous setting, so tests can restore it."""
    global _strict_override
    previous, _strict_override = _strict_override, enabled
    return previous


def is_strict() -> bool:
    """Whether ``@tool`` without ``strict=`` is strict right now."""
    if _strict_override is not None:
        return _strict_override
    return os.environ.get(STRICT_ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def _defined_in_class(func: Callable[..., Any]) -> bool:
    """True when ``func`` was written in a class body (its qualified name is ``...Class.func``)."""
    parts = getattr(func, "__qualname__", "").split(".")
    return len(parts) >= 2 and parts[-2] != "<locals>"


class Tool:
    """A function or method that a model can call, with its name, description and JSON schema.

    Made by :func:`tool`. Calling it runs the function directly (no validation), as the published
    API did; :meth:`run` / :meth:`arun` validate a model's arguments first.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = _UNSET,
        strict: bool | None = None,
    ) -> None:
        self._kind = "function"
        if isinstance(func, staticmethod):
            func = func.__func__
            self._kind = "static"
        elif isinstance(func, classmethod):
            func = func.__func__
            self._kind = "class"
        elif _defined_in_class(func):
            self._kind = "method"
        if not callable(func):
            raise ToolDefinitionError(f"@tool needs a function, got {type(func).__name__}")
        tool_name = name if name is not None else getattr(func, "__name__", None)
        if not isinstance(tool_name, str) or not _NAME_RE.match(tool_name):
            raise ToolDefinitionError(
                f"tool name {tool_name!r} is not allowed: use 1-64 letters, digits, '_' or '-' "
                "(pass name='...' to @tool)"
            )
        if timeout is not _UNSET and timeout is not None and not (timeout > 0):
            raise ToolDefinitionError(
                f"tool {tool_name!r}: timeout must be a positive number of seconds or None"
            )
        self.func = func
        self.name: str = tool_name
        self.strict: bool = is_strict() if strict is None else strict
        self.signature: ToolSignature = build_signature(
            func,
            tool_name=tool_name,
            skip_first=self._kind in ("method", "class"),
            strict=self.strict,
            description=description,
        )
        self.description: str = self.signature.description
        self._timeout = timeout
        self.is_async: bool = inspect.iscoroutinefunction(func)
        self._owner: Any = None
        self._attr: str | None = None
        self.__doc__ = func.__doc__
        self.__name__ = getattr(func, "__name__", tool_name)
        self.__qualname__ = getattr(func, "__qualname__", tool_name)
        self.__module__ = getattr(func, "__module__", __name__)
        self.__wrapped__ = func

    # ------------------------------------------------------------------ description
    @property
    def timeout(self) -> float | None:
        """The tool's own deadline in seconds; None means no deadline (runs on the caller's thread).
        Tools that did not set one use the executor's default (see :attr:`has_timeout`)."""
        return None if self._timeout is _UNSET else self._timeout

    @property
    def has_timeout(self) -> bool:
        """True when ``@tool(timeout=...)`` was given (a number or None)."""
        return self._timeout is not _UNSET

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments object."""
        return self.signature.parameters

    def spec(self) -> dict[str, Any]:
        """The tool in the OpenAI function-tool format (one entry of ``tools=``)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def __repr__(self) -> str:
        bound = f" bound to {type(self._owner).__name__}" if self._owner is not None else ""
        return f"<Tool {self.name!r}{bound}>"

    # ------------------------------------------------------------------ binding (descriptor)
    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = name

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Pickle by reference (envs and tool groups cross process boundaries): a bound tool is
        # looked up again on its (pickled) owner, a module-level tool by its import path.
        if self._owner is not None and self._attr is not None:
            return getattr, (self._owner, self._attr)
        return _import_tool, (self.__module__, self.__qualname__)

    def __get__(self, instance: Any, owner: type | None = None) -> Tool:
        if self._kind == "class":
            target = owner if owner is not None else type(instance)
        elif self._kind == "method":
            target = instance
        else:
            return self
        if target is None:
            return self
        bound = object.__new__(type(self))
        bound.__dict__.update(self.__dict__)
        bound._owner = target
        return bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function as written (no validation); a coroutine for an async tool."""
        if self._owner is not None:
            return self.func(self._owner, *args, **kwargs)
        return self.func(*args, **kwargs)

    # ------------------------------------------------------------------ validated calls
    def bind_arguments(
        self,
        arguments: Any,
        context: ToolContext | None = None,
        *,
        text_values: bool = False,
    ) -> tuple[list[Any], dict[str, Any]]:
        """Validate and coerce a model's ``arguments`` (a JSON object) into ``(args, kwargs)``,
        with the context injected. Raises ``ValueError`` with a model-readable message."""
        args, kwargs = self.signature.validate(arguments, text_values=text_values)
        if self.signature.context_param is not None:
            kwargs[self.signature.context_param] = context if context is not None else ToolContext()
        return args, kwargs

    def run(self, arguments: Mapping[str, Any], context: ToolContext | None = None) -> Any:
        """Validate ``arguments`` and run the tool (async tools too) to completion, here and now.

        For code, not models: errors raise (``ValueError`` for bad arguments, the tool's own
        exceptions as they are). No deadline; use a :class:`~skyrl_gym.tools.ToolExecutor` for
        model calls."""
        args, kwargs = self.bind_arguments(arguments, context)
        if self.is_async:
            outcome = _run.run_async(lambda: self(*args, **kwargs), None)
            if outcome.exception is not None:
                raise outcome.exception
            return outcome.value
        return self(*args, **kwargs)

    async def arun(self, arguments: Mapping[str, Any], context: ToolContext | None = None) -> Any:
        """Async :meth:`run`: validate, then await an async tool or call a sync one inline."""
        args, kwargs = self.bind_arguments(arguments, context)
        result = self(*args, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result


def _import_tool(module: str, qualname: str) -> Tool:
    import importlib

    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = inspect.getattr_static(obj, part) if inspect.isclass(obj) else getattr(obj, part)
    if not isinstance(obj, Tool):
        raise TypeError(f"{module}.{qualname} is not a @tool (it cannot be unpickled)")
    return obj


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = _UNSET,
    strict: bool | None = None,
) -> Any:
    """Turn a function or method into a :class:`Tool`. Use as ``@tool`` or ``@tool(...)``.

    Args:
        func: The function (given when used as a bare ``@tool``).
        name: The tool's name; defaults to the function's name.
        description: The tool's description; defaults to the docstring (without its Args section).
        timeout: Per-call deadline in seconds. ``None``: no deadline, run on the caller's thread.
            Left out: the executor's default applies.
        strict: Fail at decoration time on unannotated parameters, ``*args`` or ``**kwargs``
            (default: :func:`is_strict`).

    Argument descriptions come from the docstring (Google style, e.g. ``Args: a: The first``).
    A parameter annotated with :class:`~skyrl_gym.tools.types.ToolContext` is filled in by the
    executor and hidden from the model.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, timeout=timeout, strict=strict)

    return wrap if func is None else wrap(func)


def _as_tool(item: Any) -> Tool:
    if isinstance(item, Tool):
        return item
    if callable(item):
        return Tool(item)
    raise ToolDefinitionError(f"expected a @tool function or a callable, got {type(item).__name__}")


class ToolGroup:
    """A named set of tools: every ``@tool`` method of a subclass, plus any ``tools=`` given.

    Args:
        name: The group's name (the published API's only argument).
        tools: Extra tools (``@tool`` functions, or plain functions that are wrapped with ``tool``).
    """

    def __init__(self, name: str, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self.name = name
        self._tool_registry: dict[str, Tool] = {}
        seen: list[str] = []
        for cls in reversed(type(self).__mro__):
            for attr in vars(cls):
                if attr not in seen:
                    seen.append(attr)
        for attr in seen:
            if isinstance(inspect.getattr_static(type(self), attr, None), Tool):
                self._add(getattr(self, attr))
        for item in tools:
            self._add(_as_tool(item))

    def _add(self, bound: Tool) -> None:
        if bound.name in self._tool_registry:
            raise ToolDefinitionError(
                f"tool group {self.name!r} has two tools named {bound.name!r}; rename one"
            )
        self._tool_registry[bound.name] = bound

    # ------------------------------------------------------------------ published API
    def get_name(self) -> str:
        """The group's name."""
        return self.name

    def get_tool(self, name: str) -> Tool | None:
        """The (bound) tool called ``name``, or None. Calling it runs the function directly."""
        return self._tool_registry.get(name)

    def get_tool_names(self) -> list[str]:
        """The names of the group's tools, in definition order."""
        return list(self._tool_registry)

    def execute_tool(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call tool ``name`` with these arguments as written, without validation (published API).

        Raises :class:`~skyrl_gym.errors.ToolNotFoundError` for an unknown name."""
        return self._require(name)(*args, **kwargs)

    def get_tool_to_group_mapping(self) -> dict[str, str]:
        """``{tool name: group name}`` for every tool in the group."""
        return {name: self.name for name in self._tool_registry}

    # ------------------------------------------------------------------ additions
    def tool_specs(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools=`` list for this group."""
        return [t.spec() for t in self._tool_registry.values()]

    def run_tool(self, name: str, arguments: Mapping[str, Any], context: ToolContext | None = None) -> Any:
        """Validate ``arguments`` against tool ``name``'s schema and run it (see :meth:`Tool.run`)."""
        return self._require(name).run(arguments, context)

    async def arun_tool(
        self, name: str, arguments: Mapping[str, Any], context: ToolContext | None = None
    ) -> Any:
        """Async :meth:`run_tool`."""
        return await self._require(name).arun(arguments, context)

    def _require(self, name: str) -> Tool:
        found = self._tool_registry.get(name)
        if found is None:
            raise ToolNotFoundError(
                f"tool group {self.name!r} has no tool {name!r}; it has {self.get_tool_names()}."
                + did_you_mean(name, self._tool_registry)
            )
        return found

    def __repr__(self) -> str:
        return f"<ToolGroup {self.name!r}: {', '.join(self._tool_registry) or 'no tools'}>"
