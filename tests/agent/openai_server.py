"""A small OpenAI-compatible completions server on 127.0.0.1 for the client tests.

It serves a real model through ``HFPolicy`` and speaks the vLLM dialect the client asks for
(token-id prompts, ``token_ids`` and ``token_logprobs`` in the reply). ``faults`` is a list of
HTTP statuses (or ``"drop"`` to close the connection) answered to the first requests.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from skyrl_agent.types import GenerateRequest, SamplingParams


class CompletionsServer:
    def __init__(self, policy: Any, faults: list[Any] | None = None, token_ids_style: str = "field") -> None:
        self.policy = policy
        self.faults = list(faults or [])
        self.style = token_ids_style  # "field", "tokens" (token_id:N strings) or "none"
        self.bodies: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                server.bodies.append(body)
                if server.faults:
                    fault = server.faults.pop(0)
                    if fault == "drop":
                        self.close_connection = True
                        self.connection.close()
                        return
                    self.send_response(fault)
                    if fault == 429:
                        self.send_header("retry-after", "0.01")
                    self.end_headers()
                    self.wfile.write(b'{"error": "injected"}')
                    return
                if self.path == "/v1/chat/completions":
                    self._chat(body)
                    return
                if self.path != "/v1/completions":
                    self.send_response(404)
                    self.end_headers()
                    return
                sp = SamplingParams(
                    temperature=body.get("temperature", 1.0),
                    top_p=body.get("top_p", 1.0),
                    top_k=max(0, body.get("top_k", 0)),
                    max_tokens=body["max_tokens"],
                    stop=tuple(body.get("stop", ())),
                    seed=body.get("seed"),
                )
                out = server.policy.generate_sync([GenerateRequest(body["prompt"], sp)])[0]
                choice: dict[str, Any] = {
                    "text": out.text,
                    "finish_reason": str(out.finish_reason),
                    "logprobs": {"token_logprobs": out.logprobs},
                }
                if server.style == "field":
                    choice["token_ids"] = out.token_ids
                elif server.style == "tokens":
                    choice["logprobs"]["tokens"] = [f"token_id:{t}" for t in out.token_ids]
                self._send({"choices": [choice]})

            def _chat(self, body: dict[str, Any]) -> None:
                from skyrl_agent.chat import ChatRenderer

                ids = ChatRenderer(server.policy.tokenizer).encode_prompt(body["messages"])
                sp = SamplingParams(
                    temperature=body.get("temperature", 1.0),
                    max_tokens=body.get("max_tokens") or 16,
                    seed=body.get("seed"),
                )
                out = server.policy.generate_sync([GenerateRequest(ids, sp)])[0]
                self._send(
                    {
                        "id": f"chatcmpl-{len(server.bodies)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", "tiny"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": out.text},
                                "finish_reason": str(out.finish_reason),
                            }
                        ],
                        "usage": {
                            "prompt_tokens": len(ids),
                            "completion_tokens": len(out.token_ids),
                            "total_tokens": len(ids) + len(out.token_ids),
                        },
                    }
                )

            def _send(self, reply: dict[str, Any]) -> None:
                payload = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> CompletionsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
