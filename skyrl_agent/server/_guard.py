"""What stands between a hostile client and the app: a body-size cap, a last-resort handler that
answers every unexpected exception as OpenAI's JSON error, JSON rendering that cannot fail on
what a client sent, and response headers that cannot be forged from a request field.

Plain ASGI and the standard library only: importing this module imports no web framework."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["RequestGuard", "error_body", "header_safe", "render_json"]

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: How long a rejected body is read (and thrown away) so the client sees the 413, not a reset.
DRAIN_S = 5.0
#: Logprob written for a token whose logprob is -inf (JSON has no infinity; vLLM does the same).
NEG_INF_LOGPROB = -9999.0


def error_body(
    message: str,
    *,
    type: str = "invalid_request_error",  # noqa: A002 - the wire name
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """OpenAI's error JSON."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats replaced: -inf by :data:`NEG_INF_LOGPROB`, +inf by its
    negation, NaN by None (responses are shallow: request values were depth-checked)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else math.copysign(-NEG_INF_LOGPROB, value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def render_json(content: Any) -> bytes:
    """``content`` as compact UTF-8 JSON. Falls back to ASCII escapes when a string cannot be
    UTF-8 (a lone surrogate echoed from a request) and to finite numbers when a float is not
    (a -inf logprob), so rendering a response never fails on data."""
    try:
        return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        pass
    except ValueError:
        content = _finite(content)
    return json.dumps(_finite(content), ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


def header_safe(value: str) -> str:
    """``value`` as an HTTP header value: printable ASCII as is, anything else percent-encoded
    (a ``user`` field may hold any text, a header only Latin-1 without line breaks)."""
    if value.isascii() and value.isprintable():
        return value
    return urllib.parse.quote(value, safe="", errors="backslashreplace")


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class _BodyTooLarge(Exception):
    pass


class RequestGuard:
    """ASGI middleware: a request body over ``max_body_bytes`` gets 413 (by its
    ``Content-Length`` before anything is read, else once the bytes read pass the limit; the
    rest is read and dropped for up to :data:`DRAIN_S` so the client sees the answer), a body
    that takes longer than ``body_timeout_s`` to arrive gets 408, and an
    exception that escapes the app is logged and answered with a JSON 500 in OpenAI's shape
    (when the response has not started yet)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, body_timeout_s: float = 60.0) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            declared = _content_length(scope)
            if declared is not None and declared > self.max_body_bytes:
                await self._drain(receive)
                await self._too_large(send)
                return
            try:
                async with asyncio.timeout(self.body_timeout_s):
                    body = await self._read(receive)
            except _BodyTooLarge:
                await self._too_large(send)
                return
            except TimeoutError:
                message = (
                    f"the request body did not arrive within {self.body_timeout_s}s "
                    "(ServerConfig.body_timeout_s); send the whole body at once"
                )
                await _reply(send, 408, error_body(message, code="request_timeout"), close=True)
                return
            if body is None:  # the client left
                return
            await self.app(scope, _replay(body, receive), tracked)
        except Exception as exc:
            if started:  # part of the answer is on the wire: let the server close the connection
                raise
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            message = f"internal server error ({type(exc).__name__}); this is a server bug, please report it"
            await _reply(send, 500, error_body(message, type="server_error"))

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None when the client disconnected. Raises :class:`_BodyTooLarge`
        once the bytes pass the limit (what was read is dropped, the rest drained)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                chunks.clear()  # released before the drain
                if message.get("more_body", False):
                    await self._drain(receive)
                raise _BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _drain(self, receive: Receive) -> None:
        try:
            async with asyncio.timeout(DRAIN_S):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect" or not message.get("more_body", False):
                        return
        except TimeoutError:
            return

    async def _too_large(self, send: Send) -> None:
        limit = self.max_body_bytes
        message = (
            f"the request body is larger than this server's limit of {limit} bytes "
            f"({limit / 2**20:.1f} MiB; ServerConfig.max_request_bytes); send a smaller request"
        )
        await _reply(send, 413, error_body(message, code="request_too_large"), close=True)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: the disconnect, when it comes

    return replay


async def _reply(send: Send, status: int, body: dict[str, Any], close: bool = False) -> None:
    data = render_json(body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
