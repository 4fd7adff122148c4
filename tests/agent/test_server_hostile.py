"""The OpenAI-compatible server against hostile clients, over real HTTP on 127.0.0.1: a fuzzer
driven by the server's own OpenAPI document (Schemathesis), and hand-made requests that once
failed their neighbours, hung the event loop or answered plain-text 500s.

What must hold: every request gets a success or a documented 4xx in OpenAI's error shape whose
message names the field; never a 5xx, never a hang, never harm to other clients' requests."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from typing import Any

import httpx
import pytest

from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.server import ServerConfig, ServerThread, SessionStore
from skyrl_agent.types import GenerateRequest, SamplingParams

USER = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def server(tiny):
    """The tiny random model behind a small context, so any fuzzed generation is short."""
    from skyrl_agent.policies.hf import HFPolicy

    model, tok = tiny
    policy = HFPolicy(model, tok, seed=0, max_batch_size=16)
    config = ServerConfig(model_name="tiny", max_model_len=128, default_max_tokens=4, request_timeout_s=60)
    with ServerThread(policy, config) as s:
        yield s
    policy.close()


def _post(server: ServerThread, path: str, body: Any, timeout: float = 60) -> httpx.Response:
    """POST ``body`` as JSON with ASCII escapes (so lone surrogates travel as ``\\ud800``)."""
    return httpx.post(
        f"{server.url}{path}",
        content=json.dumps(body),
        headers={"content-type": "application/json"},
        timeout=timeout,
    )


def _error(resp: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if param is not None:
        assert error["param"] == param, error
    return error


def _health_s(server: ServerThread) -> float:
    start = time.monotonic()
    assert httpx.get(f"{server.origin}/health", timeout=5).json() == {"status": "ok"}
    return time.monotonic() - start


# --------------------------------------------------------------------------- the fuzzer
def _fuzz(server: ServerThread, operation: Any, mode: Any, statuses: Counter[tuple[str, int]]) -> None:
    """Run ``operation``'s generated cases of ``mode`` against ``server``; every answer must be
    documented (status, content type, body schema) and none a server error."""
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    label = f"{operation.method.upper()} {operation.path}"
    positive = mode.value == "positive"

    @settings(
        max_examples=50 if operation.body else 10,
        deadline=None,
        derandomize=True,  # the same cases on every run
        database=None,
        # the document's example request once (positive), then generated ones; no shrinking,
        # so the run stays bounded
        phases=[Phase.explicit, Phase.generate] if positive else [Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: Any) -> None:
        if isinstance(case.body, dict) and sum(statuses.values()) % 2:
            case.body["model"] = "tiny"  # half the cases get past the 404 to the generation
        response = case.call(base_url=server.origin, timeout=60)
        statuses[(label, response.status_code)] += 1
        case.validate_response(response, checks=checks)

    fuzz()


@pytest.mark.slow
def test_fuzzed_requests_get_documented_answers_and_never_a_server_error(server):
    import schemathesis

    schema = schemathesis.openapi.from_url(f"{server.origin}/openapi.json")
    statuses: Counter[tuple[str, int]] = Counter()
    start = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        _fuzz(server, operation, schemathesis.GenerationMode.POSITIVE, statuses)
        if operation.body:  # the only inputs that can be negated (any path string is valid)
            _fuzz(server, operation, schemathesis.GenerationMode.NEGATIVE, statuses)
    elapsed = time.monotonic() - start
    print(f"fuzzed {sum(statuses.values())} requests in {elapsed:.1f}s: {dict(statuses)}")
    assert not [k for k in statuses if k[1] >= 500]
    assert any(status == 200 for (label, status) in statuses if "completions" in label)  # got through
    assert _health_s(server) < 1.0


def test_the_document_declares_400_not_422_and_the_request_bodies(server):
    doc = httpx.get(f"{server.origin}/openapi.json", timeout=10).json()
    text = json.dumps(doc)
    assert '"422"' not in text and "HTTPValidationError" not in text
    for path in ("/v1/chat/completions", "/v1/completions"):
        op = doc["paths"][path]["post"]
        assert {"200", "400", "404", "413", "504"} <= set(op["responses"])
        ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.rsplit("/", 1)[1] in doc["components"]["schemas"]
        assert "text/event-stream" in op["responses"]["200"]["content"]
        error_ref = op["responses"]["400"]["content"]["application/json"]["schema"]["$ref"]
        assert error_ref.endswith("/ErrorResponse")
    messages = doc["components"]["schemas"]["ChatRequest"]["properties"]["messages"]
    assert messages["items"]["properties"]["role"]["enum"][0] == "system"


# --------------------------------------------------------------------------- one bad neighbour
async def _concurrently(
    server: ServerThread, bad: dict[str, Any], neighbours: int = 15
) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=120) as client:

        async def one(extra: dict[str, Any]) -> httpx.Response:
            body = {"model": "tiny", "messages": USER, "max_tokens": 4, **extra}
            return await client.post(
                f"{server.url}/chat/completions",
                content=json.dumps(body),
                headers={"content-type": "application/json"},
            )

        return list(await asyncio.gather(one(bad), *[one({"seed": i}) for i in range(neighbours)]))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("bad", "param"),
    [({"top_p": 5e-324}, "top_p"), ({"seed": 2**64}, "seed"), ({"temperature": 1e-300}, None)],
    ids=["tiny-top_p", "seed-2**64", "tiny-temperature"],
)
def test_one_bad_request_among_15_valid_neighbours_fails_alone(server, bad, param):
    first, *neighbours = asyncio.run(_concurrently(server, bad))
    assert [r.status_code for r in neighbours] == [200] * 15, [
        r.text for r in neighbours if r.status_code != 200
    ]
    if param is None:  # a temperature below 1e-5 samples greedily
        assert first.status_code == 200, first.text
    else:
        error = _error(first, 400, param)
        assert param in error["message"]


def test_a_row_that_fails_inside_a_batch_fails_alone(tiny, monkeypatch, static_policy):
    """Below the server, on the static baseline (``bench/static_policy.py``): a request that slips
    past every check fails only its own caller. A seed torch cannot take (``with_turn`` skips
    validation) is refused before the batch; a row whose sampling raises (injected here) makes the
    micro-batcher retry the batch's rows one by one."""
    import static_policy as static_module

    from skyrl_gym.errors import ConfigError

    real = static_module._sampling.sample_rows

    def faulty(logits_BV: Any, params: Any, generators: Any) -> Any:
        if any(p.seed == 666 for p in params):
            raise RuntimeError("a fault in one row")
        return real(logits_BV, params, generators)

    monkeypatch.setattr(static_module._sampling, "sample_rows", faulty)
    model, tok = tiny
    policy = static_policy(model, tok, seed=0, batch_wait_s=0.05)
    good = SamplingParams(max_tokens=3)
    ids = tok.encode("Hello")

    async def main() -> list[Any]:
        seeds = [0, 1, 666, 2, 2**64, 3]
        calls = [policy.generate([GenerateRequest(ids, good.with_turn(3, s))]) for s in seeds]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(main())
    assert isinstance(results[2], RuntimeError) and "one row" in str(results[2])
    assert isinstance(results[4], ConfigError) and "seed" in str(results[4])
    others = [r for i, r in enumerate(results) if i not in (2, 4)]
    assert all(not isinstance(r, BaseException) and len(r[0].token_ids) == 3 for r in others), others


def test_a_failed_engine_step_fails_its_rows_and_the_engine_goes_on(tiny, monkeypatch):
    """The engine's boundary: a request with a seed torch cannot take is refused before it is
    queued, naming the seed; a step whose sampling raises (injected here) fails the rows it ran,
    with that error, and the next request is served."""
    from skyrl_agent.policies import _runner, hf
    from skyrl_gym.errors import ConfigError

    model, tok = tiny
    policy = hf.HFPolicy(model, tok, seed=0)
    ids = tok.encode("Hello")
    good = SamplingParams(max_tokens=3)
    try:
        with pytest.raises(ConfigError, match="seed"):
            policy.generate_sync([GenerateRequest(ids, good.with_turn(3, 2**64))])
        real = _runner.sample_rows

        def faulty(*args: Any, **kw: Any) -> Any:
            raise RuntimeError("a fault in the step")

        monkeypatch.setattr(_runner, "sample_rows", faulty)
        with pytest.raises(RuntimeError, match="a fault in the step"):
            policy.generate_sync([GenerateRequest(ids, good.with_turn(3, 1))])
        monkeypatch.setattr(_runner, "sample_rows", real)
        [out] = policy.generate_sync([GenerateRequest(ids, good.with_turn(3, 2))])
        assert len(out.token_ids) == 3
    finally:
        policy.close()


# --------------------------------------------------------------------------- bad fields
@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ('{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}]}', "messages[0].content"),
        (
            '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
            "temperature",
        ),
        ('{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "top_p": Infinity}', "top_p"),
        ('{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "top_k": -2}', "top_k"),
        ('{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "seed": -1e400}', "seed"),
        (
            '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "logit_bias": {"\\ud800": 1}}',
            "logit_bias",
        ),
        (
            '{"model": "tiny", "messages": [{"role": "user", "content": "x", "tool_calls": 5}]}',
            "messages[0].tool_calls",
        ),
        ('{"model": "tiny", "messages": [{"role": "user", "content": "x", "name": 7}]}', "messages[0].name"),
        (
            '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b", "c", "d",'
            ' "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q"]}',
            "stop",
        ),
        (
            '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "x": '
            + "[" * 70
            + "]" * 70
            + "}",
            "x" + "[0]" * 64,
        ),
        ('{"model": "tiny", "messages": [{"role": {"a": 1}, "content": "x"}]}', "messages[0].role"),
        ('{"model": "tiny", "messages": [{"role": ["user"], "content": "x"}]}', "messages[0].role"),
        ('{"model": "tiny", "messages": [["user", "x"]]}', "messages[0]"),
        (
            '{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_logprobs": "3"}',
            "top_logprobs",
        ),
        (
            '{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2.5}',
            "top_logprobs",
        ),
        ('{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "logprobs": "true"}', "logprobs"),
        (
            '{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": "4"}',
            "max_tokens",
        ),
        ("[" * 100_000, None),
        ("not json", None),
        ("", None),
    ],
    ids=[
        "surrogate",
        "nan",
        "infinity",
        "top_k",
        "huge-float-seed",
        "surrogate-key",
        "tool_calls",
        "name",
        "stops",
        "deep",
        "role-object",
        "role-list",
        "message-not-an-object",
        "top_logprobs-string",
        "top_logprobs-float",
        "logprobs-string",
        "max_tokens-string",
        "deeper-than-the-parser",
        "not-json",
        "empty",
    ],
)
def test_hostile_fields_get_400_in_the_openai_shape(server, raw, param):
    resp = httpx.post(
        f"{server.url}/chat/completions",
        content=raw,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    error = _error(resp, 400, param)
    if param is not None:
        assert param.split("[")[0].split(".")[0] in error["message"]


def test_completions_prompt_surrogate_count_and_length(server):
    error = _error(_post(server, "/completions", {"model": "tiny", "prompt": "a\ud800b"}), 400, "prompt")
    assert "surrogate" in error["message"]
    many = {"model": "tiny", "prompt": ["a"] * 5, "n": 4}  # 20 sequences > max_n 16
    assert "max_n" in _error(_post(server, "/completions", many), 400, "prompt")["message"]
    ids = {"model": "tiny", "prompt": [1] * 200}
    assert _error(_post(server, "/completions", ids), 400, "prompt")["code"] == "context_length_exceeded"


def test_max_tokens_past_the_context_is_400_naming_it_and_quick(server):
    start = time.monotonic()
    resp = _post(server, "/chat/completions", {"model": "tiny", "messages": USER, "max_tokens": 10**9})
    error = _error(resp, 400, "max_tokens")
    assert "ask for at most" in error["message"] and time.monotonic() - start < 5
    # without max_tokens the default is cut to what fits
    ok = _post(server, "/completions", {"model": "tiny", "prompt": [1] * 126})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] <= 2


def test_any_user_field_makes_a_valid_session_header(server):
    resp = _post(
        server,
        "/chat/completions",
        {"model": "tiny", "messages": USER, "max_tokens": 1, "user": "日本\r\nX: y"},
    )
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-session-id"] == "%E6%97%A5%E6%9C%AC%0D%0AX%3A%20y" and "x" not in resp.headers


def test_unknown_routes_and_methods_answer_openai_json(server):
    _error(httpx.get(f"{server.origin}/v1/nothing", timeout=10), 404)
    _error(httpx.put(f"{server.origin}/health", timeout=10), 405)


# --------------------------------------------------------------------------- size and time
@pytest.mark.slow
def test_a_20mb_prompt_gets_413_quickly_while_health_answers(server):
    body = json.dumps(
        {"model": "tiny", "messages": [{"role": "user", "content": "word " * 4_000_000}]}
    ).encode()
    assert len(body) > 20 * 10**6
    answer: dict[str, Any] = {}

    def send() -> None:
        start = time.monotonic()
        resp = httpx.post(
            f"{server.url}/chat/completions",
            content=body,
            headers={"content-type": "application/json"},
            timeout=60,
        )
        answer["resp"], answer["s"] = resp, time.monotonic() - start

    sender = threading.Thread(target=send)
    sender.start()
    latencies = []
    while sender.is_alive():
        latencies.append(_health_s(server))
        time.sleep(0.05)
    sender.join()
    error = _error(answer["resp"], 413)
    assert "max_request_bytes" in error["message"] and answer["s"] < 10
    assert max(latencies) < 1.0, latencies


def test_a_prompt_under_the_body_cap_but_over_the_character_cap_is_400_before_tokenizing(server):
    text = "word " * 400_000  # 2 MB: under max_request_bytes, over 64 x 128 characters
    start = time.monotonic()
    error = _error(_post(server, "/completions", {"model": "tiny", "prompt": text}), 400, "prompt")
    assert "max_prompt_chars" in error["message"] and time.monotonic() - start < 5
    messages = [{"role": "user", "content": text}]
    assert (
        "max_prompt_chars"
        in _error(
            _post(server, "/chat/completions", {"model": "tiny", "messages": messages}), 400, "messages"
        )["message"]
    )
    assert _health_s(server) < 1.0


def test_a_stalled_body_gets_408_and_the_server_keeps_answering(tokenizer):
    import socket

    config = ServerConfig(model_name="m", body_timeout_s=0.5)
    with ServerThread(ScriptedPolicy(tokenizer, ["ok"]), config) as stalled:
        with socket.create_connection((stalled.host, stalled.port), timeout=10) as sock:
            head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            sock.sendall(f'{head}Content-Length: 1000\r\n\r\n{{"model": '.encode())
            start = time.monotonic()
            data = b""
            while chunk := sock.recv(65536):  # the server closes the connection after the 408
                data += chunk
            reply = data.decode()
            assert reply.startswith("HTTP/1.1 408") and "body_timeout_s" in reply
            assert time.monotonic() - start < 5
        assert _health_s(stalled) < 1.0


def test_a_chunked_body_past_the_limit_gets_413(tokenizer):
    config = ServerConfig(model_name="m", max_request_bytes=1000)
    with ServerThread(ScriptedPolicy(tokenizer, ["ok"]), config) as small:

        def chunks() -> Any:  # no Content-Length: the limit is found while reading
            yield b'{"model": "m", "messages": [{"role": "user", "content": "'
            for _ in range(50):
                yield b"x" * 100
            yield b'"}]}'

        resp = httpx.post(
            f"{small.url}/chat/completions", content=chunks(), headers={"content-type": "application/json"}
        )
        assert "1000 bytes" in _error(resp, 413)["message"]
        ok = _post(small, "/chat/completions", {"model": "m", "messages": USER})
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "ok"


class _SlowPolicy(ScriptedPolicy):
    async def generate(self, requests: Any) -> Any:
        await asyncio.sleep(30)
        return await super().generate(requests)


def test_every_generation_has_a_deadline(tokenizer):
    config = ServerConfig(model_name="m", request_timeout_s=0.5)
    with ServerThread(_SlowPolicy(tokenizer, ["never"]), config) as slow:
        start = time.monotonic()
        resp = _post(slow, "/chat/completions", {"model": "m", "messages": USER})
        assert _error(resp, 504)["type"] == "timeout" and time.monotonic() - start < 5


class _BrokenStore(SessionStore):
    def ids(self) -> dict[str, int]:
        raise KeyError("a bug")


def test_a_server_bug_is_a_json_500_not_plain_text(tokenizer):
    store = _BrokenStore()
    with ServerThread(ScriptedPolicy(tokenizer, ["x"]), ServerConfig(model_name="m"), store=store) as broken:
        error = _error(httpx.get(f"{broken.url}/sessions", timeout=10), 500)
        assert error["type"] == "server_error" and "KeyError" in error["message"]
        assert _health_s(broken) < 1.0
