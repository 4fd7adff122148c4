"""Data types of the tools layer: calls, parse results, tool results, error kinds, context.

The flow of one model turn::

    text ──parser.parse──► ParseResult(calls=[ToolCall...], errors=[ParseError...])
         ──executor.execute──► [ToolResult...] ──.to_message()──► {"role": "tool", ...}

A model's mistake never raises along this path: it becomes a :class:`ToolResult` whose
``error`` is an :class:`ErrorKind` and whose ``content`` tells the model what went wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

__all__ = [
    "ErrorKind",
    "ToolCall",
    "ParseError",
    "ParseResult",
    "ToolResult",
    "ToolContext",
    "ToolCallParser",
    "ToolSchemaWarning",
]

EnvT = TypeVar("EnvT")


class ErrorKind(StrEnum):
    """Why a tool call did not produce a normal result: each is the model's doing (or the tool's
    answer to it), and the model sees it as an observation.

    There is no kind for infrastructure failures: an
    :class:`~skyrl_gym.errors.InfrastructureError` raised by a tool (the sandbox or the Docker
    daemon gone, a retrieval server or judge down after retries) is re-raised by the executor
    and out of ``env.step``, and the runtime masks the episode instead of showing it to the
    model or scoring it 0."""

    PARSE_ERROR = "parse_error"
    """The text looked like a tool call but could not be read (bad JSON, unclosed tag...)."""
    UNKNOWN_TOOL = "unknown_tool"
    """The call names a tool that no attached group provides."""
    INVALID_ARGUMENTS = "invalid_arguments"
    """The arguments are missing, unexpected, or of the wrong type for the tool's schema."""
    TOOL_ERROR = "tool_error"
    """The tool ran and raised an exception (any but an ``InfrastructureError``)."""
    TIMEOUT = "timeout"
    """The tool did not finish within its deadline."""
    TOO_MANY_CALLS = "too_many_calls"
    """The turn held more calls than the executor runs per turn; the rest were not run."""


class ToolSchemaWarning(UserWarning):
    """A ``@tool`` function is usable but its schema is weaker than it could be (for example an
    unannotated parameter). Turn these into errors with ``@tool(strict=True)`` or
    ``skyrl_gym.tools.set_strict(True)``."""


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for."""

    name: str
    """The tool's name as the model wrote it."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """The arguments as the model wrote them (decoded from JSON; not yet validated)."""
    id: str = "call_0"
    """The call id: the model's own id (OpenAI ``tool_calls``) or ``call_<n>`` in turn order."""
    arguments_are_text: bool = False
    """True when every argument value is raw text (``<parameter=x>...</parameter>``, XML tags):
    validation then also tries reading a value as JSON for parameters that are not strings."""
    position: int = 0
    """Where the call starts in the turn (character offset, or index); orders results."""


@dataclass(frozen=True)
class ParseError:
    """A piece of the model's turn that looked like a tool call but could not be read."""

    message: str
    """What is wrong and how the call should look, written for the model."""
    raw: str = ""
    """The offending text (at most a few hundred characters), for logs."""
    id: str = "call_0"
    """The id the error's observation answers to."""
    name: str | None = None
    """The tool name, when it could be read."""
    position: int = 0
    """Where the broken call starts in the turn; orders results."""


@dataclass(frozen=True)
class ParseResult:
    """What a parser found in one model turn. Parsers return this and never raise."""

    calls: tuple[ToolCall, ...] = ()
    """The calls that could be read, in turn order."""
    errors: tuple[ParseError, ...] = ()
    """The broken calls, in turn order."""

    @property
    def found_any(self) -> bool:
        """True when the turn contained at least one call or broken call."""
        return bool(self.calls or self.errors)


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one call (or one broken call): an observation for the model."""

    id: str
    """The id of the call this answers (``tool_call_id`` of the tool message)."""
    name: str
    """The tool's name ("" when a broken call had no readable name)."""
    content: str
    """The observation text: the tool's output, or an error message written for the model."""
    error: ErrorKind | None = None
    """None when the tool ran and returned; otherwise why it did not."""
    truncated: bool = False
    """True when ``content`` was cut in the middle to fit the observation size cap."""
    duration_s: float = 0.0
    """Wall-clock seconds spent running the tool (0 for calls that never ran)."""
    value: Any = None
    """The tool's return value before it was turned into text (None on error)."""

    @property
    def ok(self) -> bool:
        """True when the tool ran and returned normally."""
        return self.error is None

    def to_message(self, role: Literal["tool", "user"] = "tool") -> dict[str, Any]:
        """The result as a chat message.

        ``role="tool"`` (the default) gives the OpenAI tool message
        ``{"role": "tool", "tool_call_id", "name", "content"}``; ``role="user"`` gives
        ``{"role": "user", "content"}`` for chat templates without a tool role.
        """
        if role == "tool":
            return {"role": "tool", "tool_call_id": self.id, "name": self.name, "content": self.content}
        if role == "user":
            return {"role": "user", "content": self.content}
        raise ValueError(f"unknown role {role!r}; use 'tool' or 'user'")


@dataclass
class ToolContext(Generic[EnvT]):
    """What a tool may know about the call it serves.

    A tool receives it by declaring a parameter annotated with this type (``ctx: ToolContext``
    or ``ctx: ToolContext[MyEnv]``). That parameter is filled in by the executor and is not
    part of the tool's schema, so the model never sees or sets it.
    """

    env: EnvT | None = None
    """The env whose turn is being served (``BaseTextEnv.call_tools`` sets it), or None."""
    call: ToolCall | None = None
    """The call being served."""
    timeout: float | None = None
    """The deadline of this call in seconds (None: no deadline)."""
    extras: Mapping[str, Any] = field(default_factory=dict)
    """Anything else the caller of the executor wants to hand to tools."""


@runtime_checkable
class ToolCallParser(Protocol):
    """Turns a model's turn into tool calls. Register one with ``register_parser``."""

    name: str
    """The name it is registered under."""

    def parse(self, action: str | Mapping[str, Any]) -> ParseResult:
        """Read the calls in ``action`` (the turn's text, or an assistant message dict).

        Must never raise, whatever the input: problems go into ``ParseResult.errors``."""
        ...
