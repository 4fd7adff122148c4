"""Tools for envs: define them with ``@tool``, group them, parse model turns, run the calls.

::

    from skyrl_gym.tools import ToolGroup, tool, call_tools

    @tool
    def add(a: int, b: int) -> int:
        \"\"\"Add two integers.\"\"\"
        return a + b

    results = call_tools([ToolGroup("calc", tools=[add])],
                         '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')
    results[0].content                # "5"
    results[0].to_message()           # {"role": "tool", "tool_call_id": "call_0", ...}

Inside an env, ``BaseTextEnv.call_tools(action)`` does the same against ``self.tool_groups``.

The published skyrl-gym tool groups (``SQLCodeExecutorToolGroup``, ``SearchToolGroup``,
``PythonCodeExecutorToolGroup``) can be imported from here too, as from the published package.
They run on the envs' executors, so they live in :mod:`skyrl_gym.envs.published_tools`, which
``skyrl_gym.envs`` offers here through :func:`provide`: this package imports nothing above it.
"""

from collections.abc import Callable

from skyrl_gym.tools.core import STRICT_ENV_VAR, Tool, ToolGroup, is_strict, set_strict, tool
from skyrl_gym.tools.executor import (
    DEFAULT_MAX_CALLS,
    DEFAULT_MAX_OBSERVATION_CHARS,
    DEFAULT_TIMEOUT_S,
    ToolExecutor,
    acall_tools,
    call_tools,
    truncate_middle,
)
from skyrl_gym.tools.parsers import (
    FunctionTagParser,
    HermesParser,
    OpenAIParser,
    XmlTagParser,
    get_parser,
    list_parsers,
    register_parser,
)
from skyrl_gym.tools.types import (
    ErrorKind,
    ParseError,
    ParseResult,
    ToolCall,
    ToolCallParser,
    ToolContext,
    ToolResult,
    ToolSchemaWarning,
)

__all__ = [
    "provide",
    "DEFAULT_MAX_CALLS",
    "DEFAULT_MAX_OBSERVATION_CHARS",
    "DEFAULT_TIMEOUT_S",
    "STRICT_ENV_VAR",
    "ErrorKind",
    "FunctionTagParser",
    "HermesParser",
    "OpenAIParser",
    "ParseError",
    "ParseResult",
    "Tool",
    "ToolCall",
    "ToolCallParser",
    "ToolContext",
    "ToolExecutor",
    "ToolGroup",
    "ToolResult",
    "ToolSchemaWarning",
    "XmlTagParser",
    "acall_tools",
    "call_tools",
    "get_parser",
    "is_strict",
    "list_parsers",
    "register_parser",
    "set_strict",
    "tool",
    "truncate_middle",
]

#: Names served from this package by a package above it, without this one importing it: the
#: published tool groups, which ``skyrl_gym.envs`` provides (see :func:`provide`).
_PROVIDED: dict[str, Callable[[], object]] = {}


def provide(name: str, loader: Callable[[], object]) -> None:
    """Serve ``skyrl_gym.tools.<name>`` from ``loader()``, called on first use. For packages
    above this one that put a name at a published import path (``skyrl_gym.envs`` provides
    ``SearchToolGroup`` and the other published groups)."""
    _PROVIDED[name] = loader


def __getattr__(name: str) -> object:
    loader = _PROVIDED.get(name)
    if loader is None:
        raise AttributeError(f"module 'skyrl_gym.tools' has no attribute {name!r}")
    value = loader()
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PROVIDED])
