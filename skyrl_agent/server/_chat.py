"""Chat specifics: message checks, prompt ids (token-in token-out across calls), tool calls."""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any

from skyrl_agent.chat import ChatRenderer
from skyrl_agent.server._protocol import ApiError
from skyrl_agent.server.sessions import Continuation

__all__ = ["normalize_messages", "prompt_chars", "prompt_ids_for", "split_tool_calls"]

log = logging.getLogger(__name__)

_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
_CALL_BLOCK = re.compile(r"\s*<tool_call>.*?(?:</tool_call>|\Z)", re.DOTALL)


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Check roles and content; join text parts into one string; ``developer`` becomes ``system``."""
    out = []
    for i, raw in enumerate(messages):
        if not isinstance(raw, dict):
            raise ApiError(400, f"messages[{i}] must be an object with a role", param=f"messages[{i}]")
        role = raw.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise ApiError(
                400,
                f"messages[{i}].role must be one of {sorted(_ROLES)}, got {role!r}",
                param=f"messages[{i}].role",
            )
        content = raw.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if (
                    not isinstance(part, dict)
                    or part.get("type") != "text"
                    or not isinstance(part.get("text"), str)
                ):
                    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                    raise ApiError(
                        400,
                        f"messages[{i}]: content part {kind!r} is not supported (text only)",
                        param=f"messages[{i}].content",
                    )
                texts.append(part["text"])
            content = "".join(texts)
        elif content is not None and not isinstance(content, str):
            raise ApiError(
                400,
                f"messages[{i}].content must be a string, a list of text parts or null",
                param=f"messages[{i}].content",
            )
        if content is None and role != "assistant":
            raise ApiError(400, f"messages[{i}] ({role}) needs content", param=f"messages[{i}].content")
        for key in ("name", "tool_call_id"):
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise ApiError(400, f"messages[{i}].{key} must be a string", param=f"messages[{i}].{key}")
        _check_tool_calls(raw.get("tool_calls"), i)
        m = {k: v for k, v in raw.items() if k in ("name", "tool_calls", "tool_call_id")}
        m["role"] = "system" if role == "developer" else "tool" if role == "function" else role
        m["content"] = content
        out.append(m)
    return out


def _check_tool_calls(calls: Any, i: int) -> None:
    """400 unless ``calls`` is None or OpenAI's ``tool_calls``: a list of
    ``{"function": {"name": str, "arguments": str | object}}`` (``id`` and ``type`` optional)."""
    if calls is None:
        return
    where = f"messages[{i}].tool_calls"
    if not isinstance(calls, list):
        raise ApiError(400, f"{where} must be a list of tool calls", param=where)
    for k, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ApiError(
                400,
                f'{where}[{k}] must look like {{"type": "function", "function": {{"name": ..., '
                '"arguments": "{...}"}}',
                param=f"{where}[{k}]",
            )
        if not isinstance(fn.get("arguments", ""), str | dict):
            raise ApiError(
                400, f"{where}[{k}].function.arguments must be a JSON string", param=f"{where}[{k}]"
            )
        if not isinstance(call.get("id", ""), str):
            raise ApiError(400, f"{where}[{k}].id must be a string", param=f"{where}[{k}].id")


def prompt_chars(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """How many characters of text a chat prompt holds (contents, tool calls, tools)."""
    n = sum(len(m["content"] or "") for m in messages)
    n += sum(len(json.dumps(m["tool_calls"])) for m in messages if m.get("tool_calls"))
    return n + (len(json.dumps(tools)) if tools else 0)


def _renderable(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "content": m["content"] or ""} for m in messages]


def prompt_ids_for(
    renderer: ChatRenderer,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    continuation: Continuation | None,
) -> tuple[list[int], int]:
    """The prompt ids of a chat call and how many of them were reused.

    When the request repeats an earlier call of its session and one of that call's returned
    assistant messages (``continuation``), the prompt is that call's prompt ids plus the ids
    the policy sampled, plus only the new messages rendered as the template's delta: the model
    sees exactly what it produced, never a re-tokenization of it. Otherwise the messages are
    rendered once with the chat template."""
    from jinja2 import TemplateError

    try:
        if continuation is not None:
            prev = continuation.choice.token_ids
            last = prev[-1] if prev else None
            closed = (
                last is not None
                and continuation.choice.finish_reason != "length"
                and renderer.closes_turn(last)
            )
            base = list(continuation.call.prompt_ids) + list(prev)
            delta = renderer.encode_observation(
                _renderable(continuation.new_messages),
                tools,
                turn_ended_with_eos=closed,
                last_token_id=last if closed else None,
            )
            return base + delta, len(base)
        return renderer.encode_prompt(_renderable(messages), tools), 0
    except (TemplateError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        # The template met data it cannot take (a ConfigError is a ValueError): the request's
        # messages or tools, so the client's to fix.
        log.info("chat template failed on a request: %s: %s", type(exc).__name__, exc)
        raise ApiError(
            400,
            f"the chat template cannot render these messages: {type(exc).__name__}: {str(exc)[:300]}",
            param="messages",
        ) from exc


def split_tool_calls(parser: Any, text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Content without the tool-call markup, and the calls as OpenAI ``tool_calls``. Text with
    no readable call is returned whole as content (a broken call stays visible to the agent)."""
    try:
        result = parser.parse(text)
    except RecursionError:  # arguments nested past what the JSON parser takes: not a call
        return text, []
    if not result.calls:
        return text, []
    calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments), ensure_ascii=False)},
        }
        for c in result.calls
    ]
    content = _CALL_BLOCK.sub("", text).strip()
    return (content or None), calls
