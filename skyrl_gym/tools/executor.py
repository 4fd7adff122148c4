"""Run a model's tool calls and turn every outcome the model caused, good or bad, into an observation.

::

    executor = ToolExecutor([Calculator()], timeout=10.0)
    results = executor.execute(get_parser("hermes").parse(model_turn))
    observations = [r.to_message() for r in results]

The executor never raises because of what the model wrote. Each problem becomes a
:class:`~skyrl_gym.tools.types.ToolResult` with an :class:`~skyrl_gym.tools.types.ErrorKind`
and a message written for the model: ``parse_error`` (the parser's explanation and the expected
format), ``unknown_tool`` (with "did you mean" and the list of tools), ``invalid_arguments``
(what is missing or mistyped, and the expected parameters), ``tool_error`` (the exception the
tool raised), ``timeout`` (the deadline that ran out).

Infrastructure failures are not the model's doing and never become observations: an
:class:`~skyrl_gym.errors.InfrastructureError` that a tool raises (a
:class:`~skyrl_gym.errors.SandboxError` when the Docker daemon or the sandbox is gone, a
retrieval server or a judge that failed after its retries, a Harbor trial that broke) is
re-raised by :meth:`ToolExecutor.execute` and :meth:`ToolExecutor.aexecute` as it is, so it
leaves ``env.step`` and the runtime masks the episode (never a reward of 0). Every other
exception a tool raises is the model's to see, as a ``tool_error`` result. A tool therefore
needs no side channel for a broken sandbox: it lets the error raise. (A tool that hands the
model's path to a sandbox turns the sandbox's path errors,
:class:`~skyrl_gym.sandbox.SandboxPathError`, into the model's error; see
:class:`~skyrl_gym.sandbox.TerminalTools`.)

Deadlines come from the tool (``@tool(timeout=...)``) or else from the executor, never from the
model. A sync tool with a deadline runs in a worker thread, and Python cannot kill a thread: a
tool that overruns keeps running in the background and its late result is dropped. Run CPU-heavy
or untrusted code in a sandbox (a subprocess or container with its own limits), not in the tool
function. ``timeout=None`` runs a sync tool on the caller's thread without a deadline.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic

from skyrl_gym.errors import ConfigError, InfrastructureError, ToolDefinitionError, did_you_mean
from skyrl_gym.tools import _run
from skyrl_gym.tools._schema import ArgumentsError, describe_parameters
from skyrl_gym.tools.core import Tool, ToolGroup
from skyrl_gym.tools.parsers import get_parser
from skyrl_gym.tools.types import (
    ErrorKind,
    ParseError,
    ParseResult,
    ToolCall,
    ToolCallParser,
    ToolContext,
    ToolResult,
)

__all__ = [
    "ToolExecutor",
    "call_tools",
    "acall_tools",
    "truncate_middle",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_MAX_OBSERVATION_CHARS",
    "DEFAULT_MAX_CALLS",
]

DEFAULT_TIMEOUT_S = 30.0
"""Per-call deadline for tools that do not set their own."""
DEFAULT_MAX_OBSERVATION_CHARS = 16_000
"""Observations longer than this are cut in the middle."""
DEFAULT_MAX_CALLS = 32
"""Calls (and broken calls) beyond this many in one turn are not run."""


def truncate_middle(text: str, limit: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``limit`` characters, keeping its start and end and marking the cut.

    Returns ``(text, was_truncated)``."""
    if len(text) <= limit:
        return text, False
    marker = ""
    for _ in range(4):  # the marker's length changes the count it shows: settle it
        new = f"\n[... {len(text) - (limit - len(marker))} characters truncated ...]\n"
        if new == marker:
            break
        marker = new
    room = limit - len(marker)
    if room < 2:
        return text[:limit], True
    head = (room + 1) // 2
    tail = room - head
    return text[:head] + marker + (text[-tail:] if tail else ""), True


def _to_text(value: Any) -> str:
    """A tool's return value as observation text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    try:
        if isinstance(value, pydantic.BaseModel):
            return value.model_dump_json()
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        if isinstance(value, (dict, list, tuple, int, float, bool)):
            return json.dumps(value, ensure_ascii=False, default=str)
    except Exception:  # noqa: BLE001 - fall back to str()
        pass
    try:
        return str(value)
    except Exception:  # noqa: BLE001
        return f"<{type(value).__name__} object>"


def _exception_text(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    try:
        msg = str(exc)
    except Exception:  # noqa: BLE001
        msg = ""
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


class ToolExecutor:
    """Runs tool calls against a fixed set of tools, turning every outcome into a ``ToolResult``
    (except an :class:`~skyrl_gym.errors.InfrastructureError`, which it re-raises).

    Args:
        tools: Tool groups, ``@tool`` functions, or both. Tool names must be unique.
        timeout: Deadline in seconds for tools that set none (None: no deadline).
        max_observation_chars: Longer observations (outputs and error messages) are cut in
            the middle with a marker.
        max_calls: At most this many calls (and broken calls) of one turn are handled; the rest
            are answered by a single ``too_many_calls`` result, so a degenerate turn with
            thousands of calls costs neither hours of tool time nor a giant observation.
    """

    def __init__(
        self,
        tools: Iterable[ToolGroup | Tool] = (),
        *,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS,
        max_calls: int = DEFAULT_MAX_CALLS,
    ) -> None:
        if max_calls < 1:
            raise ConfigError(f"max_calls must be at least 1, got {max_calls}")
        if timeout is not None and not timeout > 0:
            raise ConfigError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        if max_observation_chars < 100:
            raise ConfigError(f"max_observation_chars must be at least 100, got {max_observation_chars}")
        self.timeout = timeout
        self.max_observation_chars = max_observation_chars
        self.max_calls = max_calls
        self._tools: dict[str, Tool] = {}
        self._origin: dict[str, str] = {}
        for item in tools:
            if isinstance(item, ToolGroup):
                pairs = [(item.get_tool(n), f"group {item.get_name()!r}") for n in item.get_tool_names()]
            elif isinstance(item, Tool):
                pairs = [(item, "a standalone tool")]
            else:
                raise ToolDefinitionError(
                    f"ToolExecutor takes ToolGroups and @tool functions, got {type(item).__name__}"
                )
            for t, origin in pairs:
                assert t is not None
                if t.name in self._tools:
                    raise ToolDefinitionError(
                        f"tool {t.name!r} is provided by both {self._origin[t.name]} and {origin}; rename one"
                    )
                self._tools[t.name] = t
                self._origin[t.name] = origin

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools this executor runs."""
        return list(self._tools)

    def tool_specs(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools=`` list of every tool."""
        return [t.spec() for t in self._tools.values()]

    # ------------------------------------------------------------------ sync
    def execute(
        self,
        calls: ParseResult | Iterable[ToolCall | ParseError] | ToolCall,
        context: ToolContext | None = None,
    ) -> list[ToolResult]:
        """Run the calls one after another, in turn order; one result per call or parse error.

        Raises the :class:`~skyrl_gym.errors.InfrastructureError` a tool raised (the calls after
        it are not run); nothing else raises."""
        items, overflow = self._split(calls)
        results = []
        for item in items:
            try:
                results.append(self._execute_one(item, context))
            except InfrastructureError:
                raise
            except Exception as exc:  # noqa: BLE001 - last line of defence: never raise
                results.append(self._internal_error(item, exc))
        return results + overflow

    def _execute_one(self, item: ToolCall | ParseError, context: ToolContext | None) -> ToolResult:
        prepared = self._prepare(item, context)
        if isinstance(prepared, ToolResult):
            return prepared
        tool, args, kwargs, timeout = prepared
        started = time.perf_counter()
        if tool.is_async:
            outcome = _run.run_async(lambda: tool(*args, **kwargs), timeout)
        else:
            outcome = _run.run_sync(lambda: tool(*args, **kwargs), timeout)
        return self._finish(item, tool, outcome, timeout, time.perf_counter() - started)

    # ------------------------------------------------------------------ async
    async def aexecute(
        self,
        calls: ParseResult | Iterable[ToolCall | ParseError] | ToolCall,
        context: ToolContext | None = None,
    ) -> list[ToolResult]:
        """Async :meth:`execute`: async tools are awaited (cancelled at the deadline), sync tools
        with a deadline run in a worker thread so the event loop is never blocked. Raises an
        :class:`~skyrl_gym.errors.InfrastructureError` as :meth:`execute` does."""
        items, overflow = self._split(calls)
        results = []
        for item in items:
            try:
                results.append(await self._aexecute_one(item, context))
            except InfrastructureError:
                raise
            except Exception as exc:  # noqa: BLE001
                results.append(self._internal_error(item, exc))
        return results + overflow

    async def _aexecute_one(self, item: ToolCall | ParseError, context: ToolContext | None) -> ToolResult:
        prepared = self._prepare(item, context)
        if isinstance(prepared, ToolResult):
            return prepared
        tool, args, kwargs, timeout = prepared
        started = time.perf_counter()
        if tool.is_async:
            outcome = await _run.arun_async(lambda: tool(*args, **kwargs), timeout)
        else:
            outcome = await _run.arun_sync(lambda: tool(*args, **kwargs), timeout)
        return self._finish(item, tool, outcome, timeout, time.perf_counter() - started)

    # ------------------------------------------------------------------ shared steps
    def _split(
        self, calls: ParseResult | Iterable[ToolCall | ParseError] | ToolCall
    ) -> tuple[list[ToolCall | ParseError], list[ToolResult]]:
        """The items to run, in turn order, and the result that answers the ones over the cap."""
        items = _ordered(calls)
        if len(items) <= self.max_calls:
            return items, []
        first_dropped = items[self.max_calls]
        msg = (
            f"This turn has {len(items)} tool calls; only the first {self.max_calls} were handled "
            f"and the rest were not run. Make at most {self.max_calls} tool calls per turn."
        )
        name = first_dropped.name if isinstance(first_dropped.name, str) else ""
        overflow = self._result(first_dropped.id, name or "", msg, ErrorKind.TOO_MANY_CALLS)
        return items[: self.max_calls], [overflow]

    def _result(
        self, call_id: str, name: str, content: str, error: ErrorKind | None, **kw: Any
    ) -> ToolResult:
        text, cut = truncate_middle(content, self.max_observation_chars)
        return ToolResult(id=call_id, name=name, content=text, error=error, truncated=cut, **kw)

    def _prepare(
        self, item: ToolCall | ParseError, context: ToolContext | None
    ) -> ToolResult | tuple[Tool, list[Any], dict[str, Any], float | None]:
        if isinstance(item, ParseError):
            return self._result(item.id, item.name or "", item.message, ErrorKind.PARSE_ERROR)
        name = item.name if isinstance(item.name, str) else str(item.name)
        tool = self._tools.get(name)
        if tool is None:
            if self._tools:
                available = ", ".join(self._tools)
                msg = f"Unknown tool {name!r}.{did_you_mean(name, self._tools)} Available tools: {available}."
            else:
                msg = f"Unknown tool {name!r}: no tools are available here."
            return self._result(item.id, name, msg, ErrorKind.UNKNOWN_TOOL)
        timeout = tool.timeout if tool.has_timeout else self.timeout
        ctx = dataclasses.replace(context or ToolContext(), call=item, timeout=timeout)
        try:
            args, kwargs = tool.bind_arguments(item.arguments, ctx, text_values=item.arguments_are_text)
        except ArgumentsError as exc:
            msg = (
                f"Invalid arguments for tool {name!r}: {exc}. "
                f"Expected parameters: {describe_parameters(tool.parameters)}."
            )
            return self._result(item.id, name, msg, ErrorKind.INVALID_ARGUMENTS)
        return tool, args, kwargs, timeout

    def _finish(
        self,
        item: ToolCall | ParseError,
        tool: Tool,
        outcome: _run.Outcome,
        timeout: float | None,
        duration: float,
    ) -> ToolResult:
        if outcome.status == "timeout":
            msg = (
                f"Tool {tool.name!r} did not finish within its {timeout:g} s time limit; its result is "
                "discarded. Try a smaller or faster call."
            )
            return self._result(item.id, tool.name, msg, ErrorKind.TIMEOUT, duration_s=duration)
        if outcome.status == "error":
            if isinstance(outcome.exception, InfrastructureError):
                raise outcome.exception  # not the model's doing: out of env.step, the episode is masked
            msg = f"Tool {tool.name!r} failed: {_exception_text(outcome.exception)}"
            return self._result(item.id, tool.name, msg, ErrorKind.TOOL_ERROR, duration_s=duration)
        return self._result(
            item.id, tool.name, _to_text(outcome.value), None, duration_s=duration, value=outcome.value
        )

    def _internal_error(self, item: Any, exc: Exception) -> ToolResult:
        call_id = getattr(item, "id", "call_0")
        name = getattr(item, "name", "") or ""
        return self._result(
            call_id if isinstance(call_id, str) else "call_0",
            name if isinstance(name, str) else str(name),
            f"Tool {name!r} failed: {_exception_text(exc)}",
            ErrorKind.TOOL_ERROR,
        )


def _ordered(calls: ParseResult | Iterable[ToolCall | ParseError] | ToolCall) -> list[ToolCall | ParseError]:
    if isinstance(calls, (ToolCall, ParseError)):
        return [calls]
    if isinstance(calls, ParseResult):
        items: list[ToolCall | ParseError] = [*calls.calls, *calls.errors]
    else:
        items = list(calls)
    return sorted(items, key=lambda c: c.position)


def _resolve_parser(parser: str | ToolCallParser) -> ToolCallParser:
    return get_parser(parser) if isinstance(parser, str) else parser


def call_tools(
    tools: Iterable[ToolGroup | Tool],
    action: str | Mapping[str, Any],
    parser: str | ToolCallParser = "hermes",
    *,
    context: ToolContext | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS,
    max_calls: int = DEFAULT_MAX_CALLS,
) -> list[ToolResult]:
    """Parse ``action`` with ``parser`` (a registered name or a parser) and run the calls.

    Returns one result per call or broken call (empty when the turn has none). Raises only for
    the developer's mistakes (an unknown parser name, duplicate tool names) and for the
    :class:`~skyrl_gym.errors.InfrastructureError` a tool raised."""
    executor = ToolExecutor(
        tools, timeout=timeout, max_observation_chars=max_observation_chars, max_calls=max_calls
    )
    return executor.execute(_resolve_parser(parser).parse(action), context)


async def acall_tools(
    tools: Iterable[ToolGroup | Tool],
    action: str | Mapping[str, Any],
    parser: str | ToolCallParser = "hermes",
    *,
    context: ToolContext | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS,
    max_calls: int = DEFAULT_MAX_CALLS,
) -> list[ToolResult]:
    """Async :func:`call_tools`."""
    executor = ToolExecutor(
        tools, timeout=timeout, max_observation_chars=max_observation_chars, max_calls=max_calls
    )
    return await executor.aexecute(_resolve_parser(parser).parse(action), context)
