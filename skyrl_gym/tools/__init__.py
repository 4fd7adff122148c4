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
"""

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
