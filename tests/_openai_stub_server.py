"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests (``/v1/chat/completions``).

It answers deterministically from rules the test sets, and can be told to fail::

    with OpenAIStubServer() as server:          # picks a free port
        server.reply_when("Harrowby", "Matches the reference.\\nVERDICT: CORRECT")
        server.default_reply = "VERDICT: INCORRECT"
        server.fail_next(500, 500)              # the next two requests get HTTP 500
        server.delay_next(2.0)                  # the request after that waits 2 s before answering
        litellm.completion(model="openai/stub", api_base=server.base_url, ...)
        server.requests                         # every JSON body received, in order

A rule is a function of the request body returning the reply text or ``None``; the first rule
that answers wins; ``default_reply`` is used when none does. Not a mock of a client library:
requests go through real sockets and the real HTTP stack of whatever client the test uses.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OpenAIStubServer", "last_user_text"]

Rule = Callable[[dict[str, Any]], str | None]


def last_user_text(body: dict[str, Any]) -> str:
    """The content of the last ``user`` message of a chat request ("" when there is none)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    return ""


class OpenAIStubServer:
    """See the module docstring. Use as a context manager; ``close()`` is idempotent."""

    def __init__(self, default_reply: str = "OK") -> None:
        self.default_reply = default_reply
        self.rules: list[Rule] = []
        self.requests: list[dict[str, Any]] = []
        self._failures: list[int] = []
        self._delays: list[float] = []
        self._lock = threading.Lock()
        self._closed = False
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(
                        400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}}
                    )
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                with stub._lock:
                    stub.requests.append(body)
                    status = stub._failures.pop(0) if stub._failures else 200
                    delay = stub._delays.pop(0) if stub._delays else 0.0
                if delay:
                    time.sleep(delay)
                if status != 200:
                    kind = (
                        "rate_limit_exceeded"
                        if status == 429
                        else "server_error"
                        if status >= 500
                        else "invalid_request_error"
                    )
                    self._send(
                        status, {"error": {"message": f"stub failure {status}", "type": kind, "code": status}}
                    )
                    return
                self._send(200, stub._completion(body))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeouts)
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        """Pass as ``api_base`` (OpenAI clients append ``/chat/completions``)."""
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-stub", daemon=True
        )
        self._thread.start()

    # ------------------------------------------------------------------ behaviour
    def reply_when(self, contains: str, reply: str) -> None:
        """Answer ``reply`` when the last user message contains ``contains`` (checked in order)."""
        self.rules.append(lambda body: reply if contains in last_user_text(body) else None)

    def fail_next(self, *statuses: int) -> None:
        """Answer the next requests with these HTTP statuses (one each), then behave again."""
        with self._lock:
            self._failures.extend(statuses)

    def delay_next(self, *seconds: float) -> None:
        """Sleep this long before answering the next requests (one value each)."""
        with self._lock:
            self._delays.extend(seconds)

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = next((r for r in (rule(body) for rule in self.rules) if r is not None), self.default_reply)
        n = len(self.requests)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [])
        completion_tokens = len(reply.split())
        return {
            "id": f"chatcmpl-stub-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the server and free the port (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIStubServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
