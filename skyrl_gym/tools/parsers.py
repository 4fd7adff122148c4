"""Tool-call parsers: read the calls in a model's turn. One interface, registered by name.

=============  =====================================================================
name           format
=============  =====================================================================
``hermes``     ``<tool_call>{"name": "f", "arguments": {...}}</tool_call>`` (Hermes, Qwen
               2.5/3); several per turn; ``arguments`` may also be a JSON string.
               Alias: ``qwen``.
``xml``        plain tags mapped to a tool and argument by configuration:
               ``get_parser("xml", tags={"sql": ("run_sql", "query")})`` reads
               ``<sql>SELECT 1</sql>`` as ``run_sql(query="SELECT 1")``.
``openai``     an assistant message with OpenAI ``tool_calls`` (a dict, its JSON text, a
               list of tool calls, or an object with ``model_dump()``).
``function``   ``<function=f><parameter=p>value</parameter></function>`` (Qwen3-Coder
               style; an optional ``<tool_call>`` wrapper is ignored). Alias: ``qwen3_coder``.
=============  =====================================================================

Every parser returns a :class:`~skyrl_gym.tools.types.ParseResult` and never raises: a call that
cannot be read becomes a :class:`~skyrl_gym.tools.types.ParseError` whose message tells the model
how the call should look. A final call whose closing tag is missing (generation stopped at the
closing tag) is accepted when its content is complete.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from skyrl_gym.errors import ConfigError, RegistrationError, did_you_mean
from skyrl_gym.tools.types import ParseError, ParseResult, ToolCall, ToolCallParser

__all__ = [
    "HermesParser",
    "XmlTagParser",
    "OpenAIParser",
    "FunctionTagParser",
    "register_parser",
    "get_parser",
    "list_parsers",
]

_RAW_LIMIT = 300
_DECODER = json.JSONDecoder(strict=False)  # models put raw newlines inside JSON strings


def _clip(text: str) -> str:
    return text if len(text) <= _RAW_LIMIT else text[:_RAW_LIMIT] + "..."


def _text_of(action: Any) -> str:
    """The text of a turn: a string, or the ``content`` of a message dict."""
    if isinstance(action, str):
        return action
    if isinstance(action, (bytes, bytearray)):
        return bytes(action).decode("utf-8", errors="replace")
    if isinstance(action, Mapping):
        content = action.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
            return "".join(
                p.get("text", "")
                for p in content
                if isinstance(p, Mapping) and isinstance(p.get("text"), str)
            )
        return ""
    return "" if action is None else str(action)


def _decode_json(text: str) -> tuple[Any, str | None]:
    """Decode one JSON value filling all of ``text`` (surrounding spaces allowed).

    Returns ``(value, None)`` or ``(None, reason)``."""
    body = text.strip()
    if body.startswith("```"):  # a code fence around the JSON
        body = re.sub(r"^```[A-Za-z]*\s*", "", body)
        body = re.sub(r"\s*```$", "", body)
    if not body:
        return None, "it is empty"
    try:
        value, end = _DECODER.raw_decode(body)
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    except RecursionError:
        return None, "the JSON is nested too deeply"
    except Exception as exc:  # noqa: BLE001 - a parser never raises
        return None, f"invalid JSON ({type(exc).__name__})"
    if body[end:].strip():
        return None, f"unexpected text after the JSON value: {_clip(body[end:].strip())!r}"
    return value, None


def _decode_until(text: str, start: int, close_tag: str) -> tuple[Any, int] | None:
    """Decode the JSON value at ``text[start:]`` if ``close_tag`` follows it; return the value and
    the position after the tag, or None."""
    i = start
    while i < len(text) and text[i].isspace():
        i += 1
    try:
        value, end = _DECODER.raw_decode(text, i)
    except Exception:  # noqa: BLE001 - not decodable this way either
        return None
    while end < len(text) and text[end].isspace():
        end += 1
    if not text.startswith(close_tag, end):
        return None
    return value, end + len(close_tag)


def _decode_arguments(arguments: Any) -> tuple[dict[str, Any] | None, str | None]:
    """``arguments`` as a dict: a dict as is, a JSON string decoded, None or "" as ``{}``."""
    if arguments is None:
        return {}, None
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}, None
        value, reason = _decode_json(arguments)
        if reason is not None:
            return None, f'"arguments" is a string but not a JSON object ({reason})'
        arguments = value
    if isinstance(arguments, Mapping):
        return dict(arguments), None
    return None, f'"arguments" must be a JSON object of parameter values, got {type(arguments).__name__}'


class _Finder:
    """The first ``needle`` at or after a position, for non-decreasing positions: linear time in
    total, so a degenerate turn (``<tool_call>`` repeated 100,000 times) parses quickly."""

    def __init__(self, text: str, needle: str) -> None:
        self.text, self.needle = text, needle
        self.at, self.since = -2, 0

    def find(self, start: int) -> int:
        if self.at == -1 and start >= self.since:
            return -1
        if self.at >= start:
            return self.at
        self.since, self.at = start, self.text.find(self.needle, start)
        return self.at


class _Ids:
    """Hands out ``call_0``, ``call_1``... in turn order."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> str:
        self.n += 1
        return f"call_{self.n - 1}"


def _never_raise(parse: Callable[[Any], ParseResult]) -> Callable[[Any, Any], ParseResult]:
    def wrapper(self: Any, action: Any) -> ParseResult:
        try:
            return parse(self, action)
        except Exception as exc:  # noqa: BLE001 - the contract: parsers never raise
            return ParseResult(
                errors=(ParseError(f"Could not read the tool call ({type(exc).__name__}). {self.hint}"),)
            )

    wrapper.__doc__ = parse.__doc__
    wrapper.__name__ = parse.__name__
    return wrapper


# ============================================================================== Hermes / Qwen
class HermesParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any number per turn."""

    name = "hermes"
    hint = 'Write each call as <tool_call>{"name": "tool_name", "arguments": {"param": "value"}}</tool_call>.'
    open_tag = "<tool_call>"
    close_tag = "</tool_call>"

    @_never_raise
    def parse(self, action: str | Mapping[str, Any]) -> ParseResult:
        """Read every ``<tool_call>`` block in the turn."""
        text = _text_of(action)
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        ids = _Ids()
        opens, closes = _Finder(text, self.open_tag), _Finder(text, self.close_tag)
        pos = 0
        while True:
            start = opens.find(pos)
            if start < 0:
                break
            body_start = start + len(self.open_tag)
            close = closes.find(body_start)
            reopen = opens.find(body_start)
            closed = close >= 0 and (reopen < 0 or close < reopen)
            if closed:
                body, pos = text[body_start:close], close + len(self.close_tag)
            else:
                end = reopen if reopen >= 0 else len(text)
                body, pos = text[body_start:end], end
            value, reason = _decode_json(body)
            if reason is not None and closed:
                # The closing tag may sit inside a JSON string (code that prints "</tool_call>"):
                # read one JSON value from the block's start and expect the closing tag after it.
                found = _decode_until(text, body_start, self.close_tag)
                if found is not None:
                    (value, pos), reason = found, None
            if reason is not None:
                where = "" if closed else f" (and the block is not closed with {self.close_tag})"
                errors.append(
                    ParseError(
                        f"Could not parse the tool call: {reason}{where}. {self.hint}",
                        raw=_clip(body),
                        id=ids.next(),
                        position=start,
                    )
                )
                continue
            if value == []:
                errors.append(
                    ParseError(
                        f"The tool call holds an empty list. {self.hint}",
                        raw=_clip(body),
                        id=ids.next(),
                        position=start,
                    )
                )
                continue
            items = value if isinstance(value, list) else [value]
            for k, item in enumerate(items):
                call_id = ids.next()
                call, error = self._read_call(item, call_id, start + k)
                if call is not None:
                    calls.append(call)
                else:
                    errors.append(
                        ParseError(
                            f"{error} {self.hint}",
                            raw=_clip(body),
                            id=call_id,
                            name=_name_of(item),
                            position=start + k,
                        )
                    )
        return ParseResult(tuple(calls), tuple(errors))

    @staticmethod
    def _read_call(item: Any, call_id: str, position: int) -> tuple[ToolCall | None, str | None]:
        if not isinstance(item, Mapping):
            return None, f"Could not parse the tool call: expected a JSON object, got {type(item).__name__}."
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            return None, 'Could not parse the tool call: it needs a "name" string.'
        raw_args = item.get("arguments", item.get("parameters"))
        arguments, reason = _decode_arguments(raw_args)
        if reason is not None:
            return None, f"Could not parse the call to {name!r}: {reason}."
        return ToolCall(name=name.strip(), arguments=arguments or {}, id=call_id, position=position), None


def _name_of(item: Any) -> str | None:
    if isinstance(item, Mapping) and isinstance(item.get("name"), str):
        return item["name"]
    return None


# ============================================================================== XML tags
_TAG_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


class XmlTagParser:
    """Plain tags such as ``<sql>...</sql>``, each mapped to a tool and one of its arguments.

    Args:
        tags: ``{tag: (tool name, argument name)}``, e.g. ``{"sql": ("run_sql", "query")}``.
        strip: Strip whitespace around the tag's content.
        allow_unclosed: Accept a final tag without its closing tag (generation stopped at it).
    """

    name = "xml"

    def __init__(
        self,
        tags: Mapping[str, tuple[str, str]] | None = None,
        *,
        strip: bool = True,
        allow_unclosed: bool = True,
    ) -> None:
        if not tags:
            raise ConfigError(
                'the xml parser needs tags: get_parser("xml", tags={"sql": ("run_sql", "query")}) '
                "maps <sql>...</sql> to run_sql(query=...)"
            )
        checked: dict[str, tuple[str, str]] = {}
        for tag, target in tags.items():
            if not isinstance(tag, str) or not _TAG_RE.match(tag):
                raise ConfigError(f"xml parser: {tag!r} is not a valid tag name (letters, digits, _ . -)")
            if not (
                isinstance(target, (tuple, list))
                and len(target) == 2
                and all(isinstance(x, str) for x in target)
            ):
                raise ConfigError(
                    f"xml parser: tag {tag!r} must map to (tool name, argument name), got {target!r}"
                )
            checked[tag] = (target[0], target[1])
        self.tags = checked
        self.strip = strip
        self.allow_unclosed = allow_unclosed
        self._open_re = re.compile("<(" + "|".join(re.escape(t) for t in checked) + ")>")
        self.hint = "Write " + " or ".join(f"<{t}>...</{t}>" for t in checked) + "."

    @_never_raise
    def parse(self, action: str | Mapping[str, Any]) -> ParseResult:
        """Read every configured tag in the turn, in order."""
        text = _text_of(action)
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        ids = _Ids()
        pos = 0
        while True:
            m = self._open_re.search(text, pos)
            if m is None:
                break
            tag = m.group(1)
            close_tag = f"</{tag}>"
            close = text.find(close_tag, m.end())
            if close < 0:
                if not self.allow_unclosed:
                    errors.append(
                        ParseError(
                            f"The <{tag}> tag is not closed; end it with {close_tag}. {self.hint}",
                            raw=_clip(text[m.start() :]),
                            id=ids.next(),
                            name=self.tags[tag][0],
                            position=m.start(),
                        )
                    )
                    break
                body, pos = text[m.end() :], len(text)
            else:
                body, pos = text[m.end() : close], close + len(close_tag)
            tool_name, arg = self.tags[tag]
            calls.append(
                ToolCall(
                    name=tool_name,
                    arguments={arg: body.strip() if self.strip else body},
                    id=ids.next(),
                    arguments_are_text=True,
                    position=m.start(),
                )
            )
        return ParseResult(tuple(calls), tuple(errors))


# ============================================================================== OpenAI tool_calls
class OpenAIParser:
    """OpenAI ``tool_calls``: ``{"role": "assistant", "tool_calls": [{"id", "type": "function",
    "function": {"name", "arguments": "<JSON string>"}}]}``.

    Accepts the message dict, its JSON text, the bare list of tool calls, a single tool call, the
    legacy ``function_call`` field, or an SDK object with ``model_dump()``. A turn that is plain
    text (no JSON) has no calls.
    """

    name = "openai"
    hint = (
        'Each tool call needs "function": {"name": "tool_name", "arguments": "{\\"param\\": \\"value\\"}"}.'
    )

    @_never_raise
    def parse(self, action: Any) -> ParseResult:
        """Read the tool calls of an assistant message."""
        if hasattr(action, "model_dump") and callable(action.model_dump):
            action = action.model_dump()
        if isinstance(action, (bytes, bytearray)):
            action = bytes(action).decode("utf-8", errors="replace")
        if isinstance(action, str):
            stripped = action.strip()
            if not stripped.startswith(("{", "[")):
                return ParseResult()
            action, reason = _decode_json(stripped)
            if reason is not None:
                return ParseResult(
                    errors=(
                        ParseError(
                            f"Could not parse the tool calls: {reason}. {self.hint}", raw=_clip(stripped)
                        ),
                    )
                )
        if isinstance(action, Mapping):
            if "tool_calls" in action:
                items = action["tool_calls"]
            elif "function" in action:
                items = [action]
            elif isinstance(action.get("function_call"), Mapping):
                items = [{"function": action["function_call"]}]
            else:
                return ParseResult()
        else:
            items = action
        if items is None:
            return ParseResult()
        if not isinstance(items, (list, tuple)):
            return ParseResult(
                errors=(ParseError(f'"tool_calls" must be a list, got {type(items).__name__}. {self.hint}'),)
            )
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        for i, item in enumerate(items):
            call_id = f"call_{i}"
            if isinstance(item, Mapping) and isinstance(item.get("id"), str) and item["id"]:
                call_id = item["id"]
            fn = item.get("function") if isinstance(item, Mapping) else None
            if not isinstance(fn, Mapping):
                errors.append(
                    ParseError(
                        f'Tool call {i} has no "function" object. {self.hint}',
                        raw=_clip(repr(item)),
                        id=call_id,
                        position=i,
                    )
                )
                continue
            name = fn.get("name")
            if not isinstance(name, str) or not name.strip():
                errors.append(
                    ParseError(
                        f'Tool call {i} needs a "name" string. {self.hint}',
                        raw=_clip(repr(fn)),
                        id=call_id,
                        position=i,
                    )
                )
                continue
            arguments, reason = _decode_arguments(fn.get("arguments"))
            if reason is not None:
                errors.append(
                    ParseError(
                        f"Could not parse the call to {name!r}: {reason}. {self.hint}",
                        raw=_clip(repr(fn.get("arguments"))),
                        id=call_id,
                        name=name,
                        position=i,
                    )
                )
                continue
            calls.append(ToolCall(name=name.strip(), arguments=arguments or {}, id=call_id, position=i))
        return ParseResult(tuple(calls), tuple(errors))


# ============================================================================== <function=...>
_FUNC_OPEN = re.compile(r"<function=([^>\n]*)>")
_PARAM_OPEN = re.compile(r"<parameter=([^>\n]*)>")


def _trim_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


class FunctionTagParser:
    """``<function=name><parameter=p>value</parameter>...</function>`` (Qwen3-Coder style).

    Values are raw text: a parameter whose type is not ``str`` also accepts the value as JSON
    (``<parameter=n>3</parameter>`` fills ``n: int``; ``[1, 2]`` fills ``list[int]``).
    """

    name = "function"
    hint = "Write each call as <function=tool_name><parameter=param>value</parameter></function>."

    @_never_raise
    def parse(self, action: str | Mapping[str, Any]) -> ParseResult:
        """Read every ``<function=...>`` block in the turn."""
        text = _text_of(action)
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        ids = _Ids()
        closes = _Finder(text, "</function>")
        pos = 0
        while True:
            m = _FUNC_OPEN.search(text, pos)
            if m is None:
                break
            close = closes.find(m.end())
            nxt = _FUNC_OPEN.search(text, m.end())
            if close >= 0 and (nxt is None or close < nxt.start()):
                body, pos = text[m.end() : close], close + len("</function>")
            else:
                end = nxt.start() if nxt is not None else len(text)
                body, pos = text[m.end() : end], end
            name = m.group(1).strip()
            call_id = ids.next()
            if not name:
                errors.append(
                    ParseError(
                        f"A <function=...> tag has no tool name. {self.hint}",
                        raw=_clip(m.group(0)),
                        id=call_id,
                        position=m.start(),
                    )
                )
                continue
            arguments, problem = self._read_parameters(body)
            if problem is not None:
                errors.append(
                    ParseError(
                        f"Could not parse the call to {name!r}: {problem}. {self.hint}",
                        raw=_clip(body),
                        id=call_id,
                        name=name,
                        position=m.start(),
                    )
                )
                continue
            calls.append(
                ToolCall(
                    name=name, arguments=arguments, id=call_id, arguments_are_text=True, position=m.start()
                )
            )
        return ParseResult(tuple(calls), tuple(errors))

    @staticmethod
    def _read_parameters(body: str) -> tuple[dict[str, Any], str | None]:
        arguments: dict[str, Any] = {}
        closes = _Finder(body, "</parameter>")
        pos = 0
        while True:
            m = _PARAM_OPEN.search(body, pos)
            if m is None:
                return arguments, None
            close = closes.find(m.end())
            nxt = _PARAM_OPEN.search(body, m.end())
            if close >= 0 and (nxt is None or close < nxt.start()):
                value, pos = body[m.end() : close], close + len("</parameter>")
            else:
                end = nxt.start() if nxt is not None else len(body)
                value, pos = body[m.end() : end], end
            key = m.group(1).strip()
            if not key:
                return arguments, "a <parameter=...> tag has no name"
            if key in arguments:
                return arguments, f"parameter {key!r} is given twice"
            arguments[key] = _trim_newline(value)


# ============================================================================== registry
_REGISTRY: dict[str, Callable[..., ToolCallParser]] = {}


def register_parser(name: str, factory: Callable[..., ToolCallParser], *, overwrite: bool = False) -> None:
    """Register a parser class (or any factory returning a parser) under ``name``.

    ``get_parser(name, **config)`` calls ``factory(**config)``. Registering a taken name raises
    :class:`~skyrl_gym.errors.RegistrationError` unless ``overwrite=True``."""
    if not isinstance(name, str) or not name:
        raise RegistrationError(f"a parser name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise RegistrationError(f"parser {name!r}: the factory must be callable, got {factory!r}")
    if name in _REGISTRY and not overwrite:
        raise RegistrationError(
            f"a parser named {name!r} is already registered; pass overwrite=True to replace it"
        )
    _REGISTRY[name] = factory


def get_parser(name: str, **config: Any) -> ToolCallParser:
    """The parser registered as ``name``, built with ``config`` (e.g. ``tags=`` for ``xml``).

    Raises :class:`~skyrl_gym.errors.ConfigError` (with a "did you mean") for an unknown name."""
    factory = _REGISTRY.get(name)
    if factory is None:
        raise ConfigError(
            f"no tool-call parser named {name!r}; registered: {list_parsers()}."
            + did_you_mean(name, _REGISTRY)
        )
    try:
        return factory(**config)
    except TypeError as exc:
        raise ConfigError(f"parser {name!r} does not accept this configuration: {exc}") from None


def list_parsers() -> list[str]:
    """The registered parser names, sorted."""
    return sorted(_REGISTRY)


register_parser("hermes", HermesParser)
register_parser("qwen", HermesParser)
register_parser("xml", XmlTagParser)
register_parser("openai", OpenAIParser)
register_parser("function", FunctionTagParser)
register_parser("qwen3_coder", FunctionTagParser)
