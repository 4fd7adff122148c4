"""Hostile clients against the Tinker-compatible server (a real server on 127.0.0.1, httpx, the tiny
model): every request gets a success or a 4xx in Tinker's error shape whose message names the
field, never a 5xx or a hang, and never harms later requests. A Schemathesis run against the
server's own OpenAPI document checks the same for generated requests."""

from __future__ import annotations

import itertools
import os
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi", reason="the `tinker` extra is not installed")
pb = pytest.importorskip("tinker.proto.tinker_public_pb2", reason="the tinker client is not installed")

import numpy as np  # noqa: E402

from integrations.tinker import TINY_RANDOM_MODEL, TinkerServer, TinkerServerConfig  # noqa: E402

pytestmark = pytest.mark.slow

PROMPT = {"chunks": [{"type": "encoded_text", "tokens": [10, 20, 30]}]}


# ---------------------------------------------------------------------------- helpers
def _assert_error(resp: httpx.Response, status: int, *names: str) -> str:
    """``resp`` is ``status`` in Tinker's error shape (category user) naming every one of ``names``."""
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    assert set(body) == {"error", "category"} and body["category"] == "user", body
    for name in names:
        assert name in body["error"], (name, body["error"])
    return body["error"]


def _poll(http: httpx.Client, rid: str, timeout_s: float = 120.0) -> httpx.Response:
    """The final answer of future ``rid`` (re-polling ``try_again``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        resp = http.post("/api/v1/retrieve_future", json={"request_id": rid, "allow_metadata_only": False})
        assert resp.status_code == 200, resp.text
        if "json" not in resp.headers["content-type"] or resp.json().get("type") != "try_again":
            return resp
    raise AssertionError(f"future {rid} did not finish within {timeout_s}s")


def _future_error(http: httpx.Client, rid: str, *names: str, timeout_s: float = 120.0) -> str:
    """Future ``rid`` failed with a user error naming every one of ``names``."""
    resp = _poll(http, rid, timeout_s)
    return _assert_error(resp, 200, *names)


def _sample(http: httpx.Client, **params: object) -> str:
    body = {"base_model": TINY_RANDOM_MODEL, "prompt": PROMPT, "sampling_params": params, "num_samples": 1}
    resp = http.post("/api/v1/asample", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()["request_id"]


def _sampled(http: httpx.Client, rid: str, timeout_s: float = 120.0) -> pb.SampleResponse:
    resp = _poll(http, rid, timeout_s)
    assert resp.headers["content-type"] == "application/x-protobuf", resp.text
    out = pb.SampleResponse()
    out.ParseFromString(resp.content)
    return out


def _session(http: httpx.Client) -> str:
    resp = http.post(
        "/api/v1/create_session", json={"tags": [], "user_metadata": {}, "sdk_version": "hostile"}
    )
    return resp.json()["session_id"]


def _fwd_bwd(model_id: str, seq_id: int, tokens: list[int], **tensors: pb.Tensor) -> bytes:
    req = pb.ForwardBackwardRequest(model_id=model_id, seq_id=seq_id, loss_fn="cross_entropy")
    datum = req.data.add()
    datum.model_input.add().encoded_text.tokens = np.asarray(tokens, np.int32).tobytes()
    for name, tensor in tensors.items():
        datum.loss_fn_inputs[name].CopyFrom(tensor)
    return req.SerializeToString()


def _dense(values: list[float], dtype: int = pb.DTYPE_FLOAT32) -> pb.Tensor:
    np_dtype = np.float32 if dtype == pb.DTYPE_FLOAT32 else np.int64
    return pb.Tensor(dense=np.asarray(values, np_dtype).tobytes(), dtype=dtype, shape=[len(values)])


def _sparse(shape: list[int], crow: list[int], col: list[int], values: list[float]) -> pb.Tensor:
    csr = pb.SparseCsr(
        values=np.asarray(values, np.float32).tobytes(),
        crow_indices=np.asarray(crow, np.int64).tobytes(),
        col_indices=np.asarray(col, np.int64).tobytes(),
    )
    return pb.Tensor(sparse_csr=csr, dtype=pb.DTYPE_FLOAT32, shape=shape)


def _post_proto(http: httpx.Client, body: bytes) -> httpx.Response:
    return http.post(
        "/api/v1/forward_backward", content=body, headers={"content-type": "application/x-protobuf"}
    )


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hostile-ckpt")


@pytest.fixture(scope="module")
def server(ckpt_dir):
    config = TinkerServerConfig(
        checkpoint_dir=str(ckpt_dir), long_poll_s=2.0, max_sample_tokens=24, max_request_bytes=1 << 20
    )
    with TinkerServer(config) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def model_id(http):
    sid = _session(http)
    body = {"session_id": sid, "model_seq_id": 0, "base_model": TINY_RANDOM_MODEL, "lora_config": {"rank": 4}}
    resp = http.post("/api/v1/create_model", json=body)
    return _poll(http, resp.json()["request_id"]).json()["model_id"]


# ---------------------------------------------------------------------------- ill-typed JSON
@pytest.mark.parametrize(
    ("route", "body", "names"),
    [
        ("create_session", {"tags": 5, "user_metadata": {}, "sdk_version": "x"}, ["tags", "list"]),
        (
            "create_model",
            {"session_id": "s", "model_seq_id": 0, "base_model": "m", "lora_config": "x"},
            ["lora_config"],
        ),
        (
            "create_model",
            {"session_id": "s", "model_seq_id": 0, "base_model": "m", "lora_config": {"rank": "abc"}},
            ["lora_config.rank", "integer", "'abc'"],
        ),
        ("create_model", {"session_id": "s", "model_seq_id": -1, "base_model": "m"}, ["model_seq_id"]),
        ("optim_step", {"model_id": "m", "seq_id": 1, "adam_params": "x"}, ["adam_params", "JSON object"]),
        (
            "optim_step",
            {"model_id": "m", "seq_id": 1, "adam_params": {"learning_rate": "fast"}},
            ["adam_params.learning_rate", "number", "'fast'"],
        ),
        (
            "optim_step",
            {"model_id": "m", "adam_params": {"beta1": 1.5}},
            ["adam_params.beta1", "less than 1"],
        ),
        ("asample", {"base_model": "m", "prompt": PROMPT, "sampling_params": "x"}, ["sampling_params"]),
        (
            "asample",
            {
                "base_model": "m",
                "prompt": {"chunks": [{"type": "encoded_text", "tokens": [-1]}]},
                "sampling_params": {},
            },
            ["prompt.chunks.0.tokens.0", "greater than or equal to 0"],
        ),
        (
            "asample",
            {"base_model": "m", "prompt": PROMPT, "sampling_params": {"max_tokens": 0}},
            ["max_tokens"],
        ),
        (
            "asample",
            {"base_model": "m", "prompt": PROMPT, "sampling_params": {"stop": 5}},
            ["sampling_params.stop"],
        ),
        (
            "asample",
            {"base_model": "m", "prompt": PROMPT, "sampling_params": {}, "num_samples": 10**9},
            ["num_samples"],
        ),
        ("save_weights", {"model_id": "m", "path": "../escape"}, ["invalid checkpoint name"]),
        ("retrieve_future", {"request_id": 7}, ["request_id", "string"]),
        ("get_info", {}, ["model_id", "required"]),
    ],
)
def test_ill_typed_bodies_get_400_naming_the_field(http, route, body, names):
    _assert_error(http.post(f"/api/v1/{route}", json=body), 400, *names)


def test_bodies_that_are_not_json_objects_get_400(http):
    _assert_error(
        http.post("/api/v1/get_info", content=b'{"model_id": ', headers={"content-type": "application/json"}),
        400,
        "not valid JSON",
    )
    _assert_error(http.post("/api/v1/get_info", json=[1, 2]), 400, "JSON object")
    _assert_error(
        http.post("/api/v1/get_info", content=b"model_id=x", headers={"content-type": "text/plain"}), 400
    )
    _assert_error(http.get("/api/v1/get_info"), 405, "not allowed")
    _assert_error(http.post("/api/v1/get_info", content=b"{}" + b" " * (2 << 20)), 413, "max_request_bytes")
    chunked = (b" " * (64 << 10) for _ in range(40))  # no Content-Length: the limit applies while reading
    _assert_error(http.post("/api/v1/get_info", content=chunked), 413, "max_request_bytes")
    chunked = (b" " * (64 << 10) for _ in range(40))
    _assert_error(_post_proto(http, chunked), 413, "max_request_bytes")


# ---------------------------------------------------------------------------- forward_backward protobuf
def test_sparse_weights_with_bad_indices_get_400(http, model_id):
    targets = _dense([21, 31, 41], pb.DTYPE_INT64)
    out_of_range = _sparse([3, 2], crow=[0, 1, 1, 1], col=[5], values=[1.0])
    decreasing = _sparse([3, 2], crow=[0, 2, 1, 2], col=[0, 1], values=[1.0, 1.0])
    short = _sparse([3, 2], crow=[0, 1], col=[0], values=[1.0])
    for tensor, what in (
        (out_of_range, "col_indices"),
        (decreasing, "crow_indices"),
        (short, "crow_indices"),
    ):
        body = _fwd_bwd(model_id, 0, [10, 20, 30], target_tokens=targets, weights=tensor)
        _assert_error(_post_proto(http, body), 400, "loss_fn_inputs['weights']", what)
    huge = pb.Tensor(dtype=pb.DTYPE_FLOAT32, shape=[3, 10**12], sparse_csr=pb.SparseCsr())
    body = _fwd_bwd(model_id, 0, [10, 20, 30], target_tokens=targets, weights=huge)
    _assert_error(_post_proto(http, body), 400, "loss_fn_inputs['weights']", "max_request_bytes")
    _assert_error(_post_proto(http, b"\xff\xff\xff"), 400, "not a ForwardBackwardRequest protobuf")


def test_token_ids_out_of_the_vocabulary_are_user_errors(http, model_id):
    weights = _dense([1.0, 1.0, 1.0])
    negative = _fwd_bwd(
        model_id, 0, [10, -4, 30], target_tokens=_dense([1, 2, 3], pb.DTYPE_INT64), weights=weights
    )
    _assert_error(_post_proto(http, negative), 400, "model_input", ">= 0")
    # seq_id 0 runs at once (no ordering), so these do not consume the model's seq_ids
    too_big = _fwd_bwd(
        model_id, 0, [10, 10**6, 30], target_tokens=_dense([1, 2, 3], pb.DTYPE_INT64), weights=weights
    )
    rid = _post_proto(http, too_big).json()["request_id"]
    _future_error(http, rid, "model_input token id 1000000", "vocabulary")
    bad_target = _fwd_bwd(
        model_id, 0, [10, 20, 30], target_tokens=_dense([1, -2, 3], pb.DTYPE_INT64), weights=weights
    )
    rid = _post_proto(http, bad_target).json()["request_id"]
    _future_error(http, rid, "target_tokens", "vocabulary")
    body = {
        "base_model": TINY_RANDOM_MODEL,
        "prompt": {"chunks": [{"tokens": [10**6]}]},
        "sampling_params": {},
    }
    rid = http.post("/api/v1/asample", json=body).json()["request_id"]
    _future_error(http, rid, "prompt token id 1000000", "vocabulary")
    # the model still trains after all that
    good = _fwd_bwd(
        model_id, 0, [10, 20, 30], target_tokens=_dense([20, 30, 40], pb.DTYPE_INT64), weights=weights
    )
    out = pb.ForwardBackwardOutput()
    out.ParseFromString(_poll(http, _post_proto(http, good).json()["request_id"]).content)
    assert out.metrics["loss:sum"] > 0


def test_a_base_model_folder_without_a_model_is_a_user_error(http, tmp_path):
    sid = _session(http)
    body = {"session_id": sid, "model_seq_id": 0, "base_model": str(tmp_path)}
    rid = http.post("/api/v1/create_model", json=body).json()["request_id"]
    _future_error(http, rid, "base_model", "no config.json")
    (tmp_path / "config.json").write_text("{not json")
    body = {"session_id": sid, "model_seq_id": 1, "base_model": str(tmp_path)}
    rid = http.post("/api/v1/create_model", json=body).json()["request_id"]
    _future_error(http, rid, "base_model", "could not be loaded")


# ---------------------------------------------------------------------------- checkpoint paths
def test_checkpoint_paths_stay_inside_the_checkpoint_directory(http, ckpt_dir, tmp_path):
    sid = _session(http)
    host = str(ckpt_dir)
    for path in (
        "tinker://../weights/x",
        "tinker://../x",
        "tinker://m/weights/../../x",
        "tinker:///etc/weights/x",
    ):
        load = {"session_id": sid, "model_seq_id": 0, "path": path, "optimizer": False}
        message = _assert_error(http.post("/api/v1/load_weights", json=load), 400, "request: path: ")
        assert host not in message and "/tmp" not in message
        sampler = {"session_id": sid, "sampling_session_seq_id": 0, "model_path": path}
        message = _assert_error(
            http.post("/api/v1/create_sampling_session", json=sampler), 400, "model_path: "
        )
        assert host not in message
    # a symlink inside the checkpoint directory that leads out of it is not followed
    outside = tmp_path / "outside" / "weights" / "x"
    outside.mkdir(parents=True)
    (outside / "meta.json").write_text('{"format": "skyrl-tinker-checkpoint-1"}')
    os.symlink(tmp_path / "outside", ckpt_dir / "escape")
    sampler = {"session_id": sid, "sampling_session_seq_id": 0, "model_path": "tinker://escape/weights/x"}
    message = _assert_error(http.post("/api/v1/create_sampling_session", json=sampler), 404, "leads outside")
    assert host not in message and str(tmp_path) not in message
    missing = {"session_id": sid, "sampling_session_seq_id": 0, "model_path": "tinker://nobody/weights/x"}
    message = _assert_error(
        http.post("/api/v1/create_sampling_session", json=missing), 404, "no checkpoint at"
    )
    assert host not in message


# ---------------------------------------------------------------------------- unbounded sampling
def test_a_billion_max_tokens_is_capped_and_later_requests_are_served(http, server):
    start = time.monotonic()
    out = _sampled(http, _sample(http, max_tokens=10**9, stop=[], temperature=1.0, seed=1), timeout_s=60)
    assert len(out.sequences[0].tokens) // 4 == server.config.max_sample_tokens  # int32 tokens
    assert out.sequences[0].stop_reason == pb.STOP_REASON_LENGTH
    small = _sampled(http, _sample(http, max_tokens=2), timeout_s=30)
    assert 1 <= len(small.sequences[0].tokens) // 4 <= 2
    assert time.monotonic() - start < 60


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    """Long generations (up to the tiny model's context), stopped by the limits under test: the
    server and a client."""
    config = TinkerServerConfig(
        checkpoint_dir=str(tmp_path_factory.mktemp("slow-ckpt")),
        long_poll_s=1.0,
        max_sample_tokens=4000,
        sample_timeout_s=3.0,
        abandoned_after_s=1.0,
    )
    with TinkerServer(config) as srv, httpx.Client(base_url=srv.url, timeout=60) as client:
        _sampled(client, _sample(client, max_tokens=1))  # load the model before timing anything
        yield srv, client


@pytest.fixture(scope="module")
def slow_server(slow):
    return slow[1]


def test_sampling_runs_on_the_engine_and_a_stopped_job_leaves_it(slow):
    """The sampler is the continuous-batching engine (its own thread); a job stopped by its
    time limit drops its row there, so the engine stops generating for it."""
    srv, client = slow
    rid = _sample(client, max_tokens=10**9, stop=[])
    _future_error(client, rid, "sample_timeout_s", timeout_s=60)
    [policy] = srv.state.samplers._cache.values()
    before = policy.engine_stats()
    time.sleep(0.5)  # the engine drops a cancelled row at its next step
    after = policy.engine_stats()
    assert before.generated_tokens > 100  # the stopped request did run on the engine
    assert after.generated_tokens == before.generated_tokens
    _sampled(client, _sample(client, max_tokens=2), timeout_s=30)


def test_a_sampling_request_past_its_deadline_is_stopped(slow_server):
    start = time.monotonic()
    rid = _sample(slow_server, max_tokens=10**9, stop=[])
    _future_error(slow_server, rid, "sample_timeout_s", "max_tokens", timeout_s=60)
    assert time.monotonic() - start < 30
    _sampled(slow_server, _sample(slow_server, max_tokens=2), timeout_s=30)


def test_a_cancelled_sampling_request_frees_the_worker(slow_server):
    rid = _sample(slow_server, max_tokens=10**9, stop=[])
    resp = slow_server.post("/api/v1/cancel_future", json={"request_id": rid})
    assert resp.status_code == 200, resp.text
    _future_error(slow_server, rid, "cancelled", timeout_s=30)
    unknown = slow_server.post("/api/v1/cancel_future", json={"request_id": "nope"})
    assert unknown.status_code == 200 and unknown.json()["status"] == "unknown"  # idempotent
    _sampled(slow_server, _sample(slow_server, max_tokens=2), timeout_s=30)


def test_an_abandoned_sampling_request_frees_the_worker(slow_server):
    abandoned = _sample(slow_server, max_tokens=10**9, stop=[])  # never polled while it runs
    small = _sample(slow_server, max_tokens=2)
    _sampled(slow_server, small, timeout_s=30)
    _future_error(slow_server, abandoned, "abandoned", timeout_s=30)


# ---------------------------------------------------------------------------- bugs and the document
def test_a_bug_is_a_500_in_tinkers_shape_and_is_logged(http, server, monkeypatch, caplog):
    def broken(model_id: str) -> dict:
        raise RuntimeError("/secret/host/path exploded")

    monkeypatch.setattr(server.state, "info", broken)
    with caplog.at_level("ERROR", logger="integrations.tinker._app"):
        resp = http.post("/api/v1/get_info", json={"model_id": "m"})
    assert resp.status_code == 500 and resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert body["category"] == "server" and "RuntimeError" in body["error"]
    assert "/secret" not in body["error"]  # the details go to the log only
    assert any("get_info" in r.getMessage() for r in caplog.records)


def test_the_openapi_document_shows_request_bodies_and_the_real_status_codes(http):
    doc = http.get("/openapi.json").json()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            assert "422" not in op["responses"], (method, path)
            if method == "post" and path != "/api/v1/forward":
                assert "requestBody" in op, (method, path)
                assert op["responses"]["400"]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"
                }
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert schemas["LoraConfigBody"]["properties"]["rank"]["minimum"] == 1
    fwd = doc["paths"]["/api/v1/forward_backward"]["post"]["requestBody"]["content"]
    assert set(fwd) == {"application/x-protobuf"}


# ---------------------------------------------------------------------------- fuzzing
schemathesis = pytest.importorskip("schemathesis", minversion="4.0")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

#: Generated requests per operation and generation mode (valid, then schema-violating bodies).
EXAMPLES = 20
#: Most of Schemathesis's coverage cases (boundary values, wrong types, unexpected methods) per operation.
COVERAGE_CASES = 40
_FUZZ_CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    config = TinkerServerConfig(
        checkpoint_dir=str(tmp_path_factory.mktemp("fuzz-ckpt")),
        long_poll_s=1.0,
        max_sample_tokens=8,
        sample_timeout_s=10.0,
        max_request_bytes=1 << 20,
    )
    with TinkerServer(config) as srv:
        yield srv


def _check_case(case, label: str, failures: list[str]) -> None:
    """Send ``case``; a failed check (or a slow answer) goes to ``failures``."""
    start = time.monotonic()
    try:
        case.call_and_validate(checks=_FUZZ_CHECKS, timeout=30)
    except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - Schemathesis groups its failures
        failures.append(f"{label}: {exc}\n  {case.as_curl_command()}")
    if time.monotonic() - start > 15:
        failures.append(f"{label}: took {time.monotonic() - start:.1f}s\n  {case.as_curl_command()}")


def _fuzz_operation(operation, mode, failures: list[str]) -> int:
    """Send ``EXAMPLES`` generated requests to ``operation``; failed checks go to ``failures``.
    Returns how many requests were sent."""
    sent = 0

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case) -> None:
        nonlocal sent
        sent += 1
        _check_case(case, f"{operation.label} [{mode.value}]", failures)

    try:
        run()
    except Unsatisfiable:  # nothing to generate in this mode (e.g. no parameters to break)
        pass
    return sent


def test_generated_requests_never_get_a_server_error(fuzz_server):
    """Schemathesis, against the server's own OpenAPI document: for every operation, valid and
    schema-violating requests never get a 5xx, an undocumented status or content type, or a
    response that breaks its schema; schema-violating ones are refused with a 4xx."""

    @schemathesis.serializer("application/x-protobuf")
    def _raw_bytes(ctx, value):  # the generated forward_backward body, sent as it is
        return value if isinstance(value, bytes) else str(value).encode()

    schema = schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json")
    failures: list[str] = []
    sent: dict[str, int] = {}
    start = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            sent[f"{operation.label} {mode.value}"] = _fuzz_operation(operation, mode, failures)
        coverage = schema.iter_coverage_cases(
            operation,
            generation_modes=list(GenerationMode),
            generation_config=schema.config.generation_for(operation=operation),
        )
        for case in itertools.islice(coverage, COVERAGE_CASES):
            _check_case(case, f"{operation.label} [coverage]", failures)
            sent[f"{operation.label} coverage"] = sent.get(f"{operation.label} coverage", 0) + 1
    elapsed = time.monotonic() - start
    operations = len({key.rsplit(" ", 1)[0] for key in sent})
    print(f"fuzzed {operations} operations: {sum(sent.values())} requests in {elapsed:.1f}s")
    assert not failures, "\n".join(failures[:20])
    assert operations >= 20 and sum(sent.values()) >= 10 * operations  # the generator really ran


def test_after_fuzzing_the_server_still_serves(fuzz_server):
    with httpx.Client(base_url=fuzz_server.url, timeout=60) as client:
        start = time.monotonic()
        assert client.get("/api/v1/healthz").json() == {"status": "ok"}
        assert time.monotonic() - start < 2
        out = _sampled(client, _sample(client, max_tokens=3, seed=0), timeout_s=60)
        assert 1 <= len(out.sequences[0].tokens) // 4 <= 3
