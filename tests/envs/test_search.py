"""The ``search`` env: BM25, exact match, the bundled data, and the Search-R1 HTTP client against a
real retrieval server on 127.0.0.1 (including failures: 503s, slow answers, 400s, a closed port)."""

from __future__ import annotations

import json
import math
import pickle
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import skyrl_gym
from skyrl_gym.envs.search import (
    BM25Config,
    BM25Index,
    Passage,
    RemoteRetriever,
    RemoteRetrieverConfig,
    RetrievalError,
    bundled_passages,
    exact_match,
    load_bundled_rows,
    normalize_answer,
    parse_response,
)
from skyrl_gym.envs.search.env import bm25_index
from skyrl_gym.errors import ConfigError, SkyRLError


# --------------------------------------------------------------------------- a real retrieval server
class RetrievalServer:
    """A Search-R1-style ``/retrieve`` server over the bundled corpus (BM25), on 127.0.0.1.

    It takes both request formats: ``{"queries": [...]}`` (Search-R1's server) and
    ``{"query": "..."}`` (SkyRL's server, which the published skyrl-gym client calls); either
    way it answers one result list per query. ``passages`` replaces the bundled corpus.
    ``fail_next`` holds HTTP statuses to answer before behaving (e.g. ``[503, 503]``);
    ``delays`` holds seconds to sleep before answering, one per request (consumed in order)."""

    def __init__(self, passages: list[Passage] | None = None) -> None:
        self.index = bm25_index() if passages is None else BM25Index(passages)
        self.fail_next: list[int] = []
        self.delays: list[float] = []
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append(body)
                    status = server.fail_next.pop(0) if server.fail_next else 200
                    delay = server.delays.pop(0) if server.delays else 0.0
                if delay:
                    time.sleep(delay)
                if self.path != "/retrieve":
                    status = 404
                if status != 200:
                    self._send(status, {"detail": f"status {status}"})
                    return
                if "query" in body:
                    queries = [body["query"]]
                elif "queries" in body:
                    queries = body["queries"]
                else:
                    self._send(422, {"detail": "field required: query"})
                    return
                results = []
                for hits in server.index.search(queries, body.get("topk") or 3):
                    docs = [
                        {"id": h.passage.id, "contents": f'"{h.passage.title}"\n{h.passage.text}'}
                        for h in hits
                    ]
                    if body.get("return_scores"):
                        results.append(
                            [{"document": d, "score": h.score} for d, h in zip(docs, hits, strict=True)]
                        )
                    else:
                        results.append(docs)
                self._send(200, {"result": results})

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/retrieve"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> RetrievalServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server():
    with RetrievalServer() as s:
        yield s


def _remote(url, **cfg):
    base = {
        "retriever": "remote",
        "search_url": url,
        "backoff_s": 0.01,
        "max_backoff_s": 0.05,
        "timeout_s": 2.0,
    }
    base.update(cfg)
    return base


def _env(targets="Harrowby", env_config=None, **extras):
    return skyrl_gym.make(
        "search",
        env_config=env_config,
        extras={"reward_spec": {"ground_truth": {"target": targets}}, **extras},
    )


# --------------------------------------------------------------------------- BM25
def test_bm25_scores_match_the_formula_worked_by_hand():
    docs = [
        Passage("a", "", "red apple"),  # len 2
        Passage("b", "", "green apple pie apple"),  # len 4, tf(apple)=2
        Passage("c", "", "blue sky"),  # len 2
    ]
    k1, b = 1.5, 0.75
    index = BM25Index(docs, BM25Config(k1=k1, b=b))
    avgdl = (2 + 4 + 2) / 3
    idf_apple = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    idf_red = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))

    def term(idf, tf, dl):
        return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))

    scores = index.scores("the red apple")  # "the" is a stopword
    assert scores[0] == pytest.approx(term(idf_apple, 1, 2) + term(idf_red, 1, 2))
    assert scores[1] == pytest.approx(term(idf_apple, 2, 4))
    assert 2 not in scores
    hits = index.search(["red apple", "purple", ""], topk=5)
    assert [h.passage.id for h in hits[0]] == ["a", "b"]
    assert hits[1] == [] and hits[2] == []


def test_bm25_parameters_change_the_ranking_and_ties_keep_corpus_order():
    docs = [Passage("short", "", "apple"), Passage("long", "", "apple apple apple pear plum fig kiwi lime")]
    no_len_norm = BM25Index(docs, BM25Config(k1=1.2, b=0.0)).search(["apple"], 2)[0]
    full_len_norm = BM25Index(docs, BM25Config(k1=1.2, b=1.0)).search(["apple"], 2)[0]
    assert no_len_norm[0].passage.id == "long"  # tf 3 wins without length normalization
    assert full_len_norm[0].passage.id == "short"
    tied = BM25Index([Passage(str(i), "", "same words") for i in range(5)]).search(["same"], 3)[0]
    assert [h.passage.id for h in tied] == ["0", "1", "2"]
    with pytest.raises(ConfigError):
        BM25Config(b=1.5)


def test_bm25_finds_the_answer_passage_for_every_bundled_question():
    index = bm25_index()
    rows = load_bundled_rows("all")
    found = 0
    for row in rows:
        hits = index.search([row["question"]], 3)[0]
        text = " ".join(f"{h.passage.title} {h.passage.text}" for h in hits).lower()
        found += any(t.lower() in text for t in row["reward_spec"]["ground_truth"]["target"])
    assert found == len(rows)


# --------------------------------------------------------------------------- data
def test_bundled_rows_have_the_published_format_and_disjoint_splits():
    train, test, everything = load_bundled_rows("train"), load_bundled_rows("test"), load_bundled_rows("all")
    assert len(train) >= 40 - len(test) and len(everything) >= 40 and len(test) >= 8
    assert {r["id"] for r in train}.isdisjoint({r["id"] for r in test})
    assert len(train) + len(test) == len(everything)
    assert sum(r["hops"] == 2 for r in everything) >= 10
    corpus = " ".join(f"{p.title} {p.text}" for p in bundled_passages()).lower()
    assert len(bundled_passages()) >= 150
    for row in everything:
        assert set(row) >= {"prompt", "env_class", "reward_spec", "data_source", "id"}
        assert row["env_class"] == "search" and row["prompt"][0]["role"] == "user"
        targets = row["reward_spec"]["ground_truth"]["target"]
        assert isinstance(targets, list) and targets[0].lower() in corpus
    with pytest.raises(ValueError, match="unknown split"):
        load_bundled_rows("dev")


# --------------------------------------------------------------------------- exact match
@pytest.mark.parametrize(
    "pred, targets, expected",
    [
        ("The Bay of Corran.", "Bay of Corran", True),
        ("  bay   OF corran ", ["x", "Bay of Corran"], True),
        ("an Albatross!", "Albatross", True),
        ("Bay of Corran Point", "Bay of Corran", False),
        ("", "Harrowby", False),
        ("theater", "ater", False),  # articles are removed as words, not as letters
    ],
)
def test_exact_match_normalizes(pred, targets, expected):
    assert exact_match(pred, targets) is expected


def test_normalize_answer():
    assert normalize_answer("The  U.S.A., an  apple!") == "usa apple"


# --------------------------------------------------------------------------- the env, local BM25
def test_solved_episode_with_the_bundled_index():
    env = _env()
    env.init([{"role": "user", "content": "q"}])
    out = env.step("I should look it up. <search>inventor of the tidewheel</search>")
    content = out.observations[0]["content"]
    assert out.observations[0]["role"] == "user"
    assert content.startswith("\n<information>Doc 1(Title: ") and content.endswith("</information>\n")
    assert "Marisol Quent" in content and out.reward == 0.0 and not out.done
    assert out.metadata["query"] == "inventor of the tidewheel" and len(out.metadata["hits"]) == 3
    out = env.step("<search>Marisol Quent born</search>")
    assert "Harrowby" in out.observations[0]["content"]
    out = env.step("<answer>wrong</answer> no wait <answer> harrowby. </answer>")  # the last answer counts
    assert out.done and out.reward == 1.0 and out.truncated is False
    assert env.get_metrics() == {
        "turns": 3,
        "searches": 2,
        "invalid_turns": 0,
        "answered": True,
        "correct": True,
        "answer_supported": True,  # "Harrowby" was in the second search's passages
    }


def test_wrong_answer_and_list_of_targets():
    env = _env(["Pellmouth", "Pellmouth city"])
    out = env.step("<answer>Mirefield</answer>")
    assert out.done and out.reward == 0.0 and out.metadata == {"answer": "Mirefield", "correct": False}
    assert env.get_metrics()["answer_supported"] is False  # answered without reading anything
    assert _env(["Pellmouth", "Pellmouth city"]).step("<answer>pellmouth city</answer>").reward == 1.0


def test_answer_supported_means_read_before_answering():
    env = _env()
    env.init([{"role": "user", "content": "q"}])
    env.step("<search>inventor of the tidewheel</search>")
    env.step("<answer>Marisol Quent</answer>")  # in the passages it was shown, though not the target
    assert env.get_metrics()["answer_supported"] is True and env.get_metrics()["correct"] is False
    env = _env()
    env.init([{"role": "user", "content": "q"}])
    env.step("<search>inventor of the tidewheel</search>")
    env.step("<answer>Quent Marisol</answer>")  # words in another order are not a quote
    assert env.get_metrics()["answer_supported"] is False


def test_model_mistakes_become_observations():
    env = _env(env_config={"max_turns": 4})
    out = env.step("I think the answer is Harrowby")
    assert (
        not out.done and out.metadata["error"] == "no_action" and "<search>" in out.observations[0]["content"]
    )
    out = env.step("<search>   </search>")
    assert out.metadata["error"] == "empty_query" and "empty" in out.observations[0]["content"]
    out = env.step("<search>" + "x" * 100_000 + "</search>")  # capped query, no match
    assert "No passage matched" in out.observations[0]["content"] and len(out.metadata["query"]) == 200
    assert env.get_metrics()["invalid_turns"] == 2


def test_turn_limit_truncates_and_skips_the_useless_last_search():
    env = _env(env_config={"retriever": "remote", "search_url": "http://127.0.0.1:9/retrieve"}, max_turns=1)
    out = env.step("<search>tidewheel</search>")  # not sent: the closed port would raise otherwise
    assert out.done and out.truncated and out.reward == 0.0 and out.observations == []
    assert env.max_turns == 1 and env.get_metrics()["searches"] == 0


def test_bad_configuration_raises_with_the_fix():
    with pytest.raises(ConfigError, match="ground_truth"):
        skyrl_gym.make("search", extras={"reward_spec": {"ground_truth": {"answer": "x"}}})
    with pytest.raises(ConfigError, match="'bm25' or 'remote'"):
        _env(env_config={"retriever": "faiss"})
    with pytest.raises(ConfigError, match="http"):
        _env(env_config={"retriever": "remote", "search_url": "127.0.0.1:8000"})
    env = skyrl_gym.make(
        "search", extras={"reward_spec": {"ground_truth": "Harrowby"}}
    )  # a bare string works
    assert env.targets == ["Harrowby"]


def test_custom_corpus_path(tmp_path):
    path = tmp_path / "corpus.jsonl"
    lines = [
        {"id": "1", "contents": '"Zorblat"\nThe zorblat is a purple fruit.'},
        {"id": "2", "title": "Other", "text": "x"},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    env = _env("purple", env_config={"corpus_path": str(path), "topk": 1})
    out = env.step("<search>zorblat colour</search>")
    assert (
        out.observations[0]["content"]
        == "\n<information>Doc 1(Title: Zorblat) The zorblat is a purple fruit.</information>\n"
    )


# --------------------------------------------------------------------------- the remote client, real server
def test_remote_env_matches_the_local_index(server):
    remote, local = _env(env_config=_remote(server.url)), _env()
    for query in ("inventor of the tidewheel", "Marisol Quent born"):
        a = remote.step(f"<search>{query}</search>")
        b = local.step(f"<search>{query}</search>")
        assert a.observations == b.observations and a.metadata == b.metadata
    assert server.requests[0] == {"queries": ["inventor of the tidewheel"], "topk": 3, "return_scores": True}
    assert remote.step("<answer>Harrowby</answer>").reward == 1.0
    assert remote.get_metrics()["retrieval_retries"] == 0


def test_503s_are_retried_with_backoff(server):
    server.fail_next = [503, 500, 429]
    env = _env(env_config=_remote(server.url))
    out = env.step("<search>capital of the Veloria Archipelago</search>")
    assert "Pellmouth" in out.observations[0]["content"]
    assert len(server.requests) == 4 and env.get_metrics()["retrieval_retries"] == 3


def test_a_slow_answer_past_the_timeout_is_retried(server):
    server.delays = [1.5]
    env = _env(env_config=_remote(server.url, timeout_s=0.3))
    start = time.monotonic()
    out = env.step("<search>Stennack cheese</search>")
    assert "Stennack Blue" in out.observations[0]["content"]
    assert len(server.requests) == 2 and time.monotonic() - start < 1.4


def test_a_400_is_not_retried_and_is_an_infrastructure_failure(server):
    server.fail_next = [400]
    env = _env(env_config=_remote(server.url))
    with pytest.raises(RetrievalError, match="HTTP 400") as info:
        env.step("<search>tidewheel</search>")
    assert len(server.requests) == 1 and info.value.last_status == 400
    assert isinstance(info.value, SkyRLError) and isinstance(info.value, RuntimeError)


def test_permanent_failure_raises_after_the_retries(server):
    server.fail_next = [503] * 10
    env = _env(env_config=_remote(server.url, max_retries=2))
    with pytest.raises(RetrievalError, match="after 3 attempt") as info:
        env.step("<search>tidewheel</search>")
    assert len(server.requests) == 3 and info.value.attempts == 3 and info.value.last_status == 503
    copy = pickle.loads(pickle.dumps(info.value))
    assert (str(copy), copy.attempts, copy.last_status) == (str(info.value), 3, 503)


def test_the_overall_deadline_bounds_a_call(server):
    server.delays = [1.0] * 20
    retriever = RemoteRetriever(
        RemoteRetrieverConfig(url=server.url, timeout_s=0.25, max_retries=50, backoff_s=0.01, deadline_s=0.8)
    )
    start = time.monotonic()
    with pytest.raises(RetrievalError):
        retriever.search(["tidewheel"], 3)
    assert time.monotonic() - start < 1.3 and 2 <= retriever.attempts <= 5


def test_connection_refused_is_retried_then_raises():
    with socket.socket() as s:  # a port that nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    waits: list[float] = []
    cfg = RemoteRetrieverConfig(
        url=f"http://127.0.0.1:{port}/retrieve", max_retries=4, backoff_s=0.1, max_backoff_s=0.3
    )
    retriever = RemoteRetriever(cfg, rng=random.Random(0), sleep=waits.append)
    with pytest.raises(RetrievalError, match="5 attempt"):
        retriever.search(["x"], 3)
    caps = [0.1, 0.2, 0.3, 0.3]  # doubling, capped at max_backoff_s; full jitter below each cap
    assert len(waits) == 4 and all(0 <= w <= c for w, c in zip(waits, caps, strict=True))
    assert retriever.retries == 4


def test_parse_response_reads_both_shapes_and_rejects_others():
    scored = {"result": [[{"document": {"id": "7", "contents": '"T"\nbody'}, "score": 2.5}]]}
    [[hit]] = parse_response(scored, 1)
    assert (hit.passage.id, hit.passage.title, hit.passage.text, hit.score) == ("7", "T", "body", 2.5)
    [[bare]] = parse_response({"result": [[{"id": "8", "contents": "U\ntext"}]]}, 1)
    assert bare.passage.title == "U"
    for body in ({}, {"result": "x"}, {"result": [[1]]}, {"result": []}):
        with pytest.raises(ValueError):
            parse_response(body, 1)


def test_check_env_passes_on_the_remote_retriever(server):
    example = skyrl_gym.spec("search").load().example()
    report = skyrl_gym.check_env(
        lambda: skyrl_gym.make("search", env_config=_remote(server.url), extras=dict(example.extras))
    )
    assert "good actions earn reward" in report.checks and server.requests


def test_targets_as_loaded_from_parquet_and_omegaconf():
    np = pytest.importorskip("numpy")
    env = _env(np.array(["Harrowby", "Harrowby town"], dtype=object))
    assert env.targets == ["Harrowby", "Harrowby town"]
    omegaconf = pytest.importorskip("omegaconf")
    extras = omegaconf.OmegaConf.create({"reward_spec": {"ground_truth": {"target": ["Pellmouth"]}}})
    cfg = omegaconf.OmegaConf.create({"topk": 2, "max_turns": 2})
    env = skyrl_gym.make("search", env_config=cfg, extras=extras)
    assert env.targets == ["Pellmouth"] and env.topk == 2 and env.max_turns == 2
    assert len(env.step("<search>capital of Veloria</search>").metadata["hits"]) == 2


# --------------------------------------------------------------------------- the published skyrl-gym config
SMALL_CORPUS = [
    Passage("z1", "Zorblat", "The zorblat is a purple fruit grown on Oskel."),
    Passage("z2", "Quellnut", "The quellnut is a hard brown nut."),
    Passage("z3", "Zorblat tree", "A zorblat tree bears fruit every second summer."),
]


@pytest.fixture
def small_server():
    with RetrievalServer(SMALL_CORPUS) as s:
        yield s


def _published(url, **cfg):
    """The published skyrl-gym ``SearchEnvConfig`` keys, no others."""
    return {"search_url": url, "topk": 2, "timeout": 5, "log_requests": False, **cfg}


def _free_port_url() -> str:
    with socket.socket() as s:  # a port that nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/retrieve"


def test_published_config_queries_the_given_server(small_server):
    env = _env("purple", env_config=_published(small_server.url))
    assert env.kind == "remote" and env.config.published
    out = env.step("Let me look. <search> zorblat fruit </search>")
    # The server got the published request: one query (stripped), the config's topk.
    assert small_server.requests == [{"query": "zorblat fruit", "topk": 2, "return_scores": True}]
    # The published observation: a JSON object whose "result" lists "Doc i: <contents>" lines.
    assert out.observations == [
        {
            "role": "user",
            "content": '\n<information>{"result": "Doc 1: \\"Zorblat\\"\\nThe zorblat is a purple fruit grown '
            'on Oskel.\\nDoc 2: \\"Zorblat tree\\"\\nA zorblat tree bears fruit every second summer.\\n"}'
            "</information>\n",
        }
    ]
    payload = json.loads(
        out.observations[0]["content"].removeprefix("\n<information>").removesuffix("</information>\n")
    )
    assert payload["result"].splitlines()[0] == 'Doc 1: "Zorblat"'
    assert out.metadata == {
        "tool_group": "SearchToolGroup",
        "tool_name": "search",
        "tool_input": [" zorblat fruit "],
        "query": "zorblat fruit",
        "hits": ["z1", "z3"],
    }
    assert (out.reward, out.done) == (0.0, False)
    out = env.step("<answer>purple</answer>")
    assert out.done and out.reward == 1.0


def test_published_config_no_hit_and_no_tag(small_server):
    env = _env("x", env_config=_published(small_server.url), max_turns=4)
    out = env.step("<search>spaceship</search>")
    assert out.observations[0]["content"] == '\n<information>{"result": ""}</information>\n'
    out = env.step("no tag at all")  # a model's mistake: an observation, no request
    assert out.metadata["tool_input"] == [None] and out.metadata["error"] == "no_action"
    assert len(small_server.requests) == 1


def test_published_config_as_omegaconf_and_as_a_dataclass(small_server):
    import dataclasses

    omegaconf = pytest.importorskip("omegaconf")

    @dataclasses.dataclass
    class SearchEnvConfig:  # the published dataclass's fields and defaults, with our server's URL
        log_requests: bool = False
        search_url: str = small_server.url
        topk: int = 3
        timeout: int = 30

    for cfg in (omegaconf.OmegaConf.create(_published(small_server.url, topk=1)), SearchEnvConfig(topk=1)):
        env = _env("purple", env_config=cfg)
        assert env.config.remote.timeout_s in (5.0, 30.0) and env.config.remote.request_format == "query"
        out = env.step("<search>zorblat fruit</search>")
        assert json.loads(out.observations[0]["content"][14:-15]) == {
            "result": 'Doc 1: "Zorblat"\nThe zorblat is a purple fruit grown on Oskel.\n'
        }
    assert [r["topk"] for r in small_server.requests] == [1, 1]
    assert (
        SearchEnvConfig().timeout == 30 and _env(env_config=SearchEnvConfig()).config.remote.timeout_s == 30.0
    )


def test_published_timeout_is_the_request_timeout(small_server):
    small_server.delays = [1.5]  # the first answer comes after the timeout; the retry is on time
    env = _env("purple", env_config=_published(small_server.url, timeout=0.3, backoff_s=0.01))
    assert env.config.remote.timeout_s == 0.3
    start = time.monotonic()
    out = env.step("<search>zorblat fruit</search>")
    assert time.monotonic() - start < 1.2 and len(small_server.requests) == 2
    assert "Doc 1: " in out.observations[0]["content"]
    # The default is the published 30 s, and the deadline always leaves room for one request.
    remote = _env(env_config=_published(small_server.url, timeout=None)).config.remote
    assert remote.timeout_s == 30.0 and remote.deadline_s == 60.0
    assert _env(env_config=_published(small_server.url, timeout=90)).config.remote.deadline_s == 90.0


@pytest.mark.parametrize("failure", ["refused", "timeout", "503"])
def test_published_config_retriever_failures_raise(small_server, failure):
    """Connection refused, a timeout, a 5xx: an infrastructure error, never reward 0."""
    url = _free_port_url() if failure == "refused" else small_server.url
    if failure == "timeout":
        small_server.delays = [2.0] * 3
    if failure == "503":
        small_server.fail_next = [503] * 3
    env = _env("purple", env_config=_published(url, timeout=0.3, max_retries=2, backoff_s=0.01))
    start = time.monotonic()
    with pytest.raises(RetrievalError, match="after 3 attempt") as info:
        env.step("<search>zorblat fruit</search>")
    assert time.monotonic() - start < 2.5
    assert info.value.attempts == 3 and isinstance(info.value, SkyRLError)
    if failure == "refused":
        assert not small_server.requests
    else:
        assert len(small_server.requests) == 3
        assert all(
            r == {"query": "zorblat fruit", "topk": 2, "return_scores": True} for r in small_server.requests
        )
    assert info.value.last_status == (503 if failure == "503" else None)


def test_log_requests_logs_each_attempt(small_server, caplog):
    small_server.fail_next = [503]
    env = _env("purple", env_config=_published(small_server.url, log_requests=True, backoff_s=0.01))
    with caplog.at_level("INFO", logger="skyrl_gym.envs.search.remote"):
        env.step("<search>zorblat fruit</search>")
    messages = [r.getMessage() for r in caplog.records if r.name == "skyrl_gym.envs.search.remote"]
    assert len(messages) == 4 and "attempt 1 failed: HTTP 503" in messages[1]
    assert small_server.url in messages[0] and '"query": "zorblat fruit"' in messages[0]
    assert messages[3].endswith("2 hit(s)")
    caplog.clear()
    with caplog.at_level("INFO", logger="skyrl_gym.envs.search.remote"):
        _env("purple", env_config=_published(small_server.url)).step("<search>zorblat</search>")
    assert not [r for r in caplog.records if r.name == "skyrl_gym.envs.search.remote"]


@pytest.mark.parametrize(
    ("env_config", "match"),
    [
        (
            {"serch_url": "http://127.0.0.1:1/retrieve"},
            "unknown search env_config key 'serch_url'. Did you mean 'search_url'?",
        ),
        ({"search_url": "http://127.0.0.1:1/retrieve", "timout": 5}, "Did you mean 'timeout'?"),
        ({"top_k": 3}, "Did you mean 'topk'?"),
        ({"log_request": True}, "Did you mean 'log_requests'?"),
        (
            {"retriever": "bm25", "search_url": "http://127.0.0.1:1/retrieve"},
            "do not apply to retriever='bm25'",
        ),
        ({"timeout": 5}, r"\['timeout'\] do not apply to retriever='bm25': set search_url"),
        (
            {"search_url": "http://127.0.0.1:1/retrieve", "corpus_path": "/x.jsonl"},
            "only apply to retriever='bm25'",
        ),
        ({"search_url": "http://127.0.0.1:1/retrieve", "timeout": 5, "timeout_s": 5}, "not both"),
        (
            {"search_url": "http://127.0.0.1:1/retrieve", "log_requests": "yes"},
            "log_requests must be true or false",
        ),
        ({"search_url": "http://127.0.0.1:1/retrieve", "topk": "many"}, "topk must be a number"),
        ({"search_url": "http://127.0.0.1:1/retrieve", "request_format": "batch"}, "request_format"),
        ({"observation_format": "xml"}, "observation_format"),
    ],
)
def test_config_mistakes_raise_with_the_fix(env_config, match):
    with pytest.raises(ConfigError, match=match):
        _env(env_config=env_config)


def test_our_own_modes_keep_their_formats(small_server):
    """``retriever="remote"`` keeps Search-R1's batch request and the passage lines; each
    format can also be chosen explicitly."""
    env = _env("purple", env_config=_remote(small_server.url, topk=1))
    assert not env.config.published
    out = env.step("<search>zorblat fruit</search>")
    assert small_server.requests[-1] == {"queries": ["zorblat fruit"], "topk": 1, "return_scores": True}
    assert out.observations[0]["content"] == (
        "\n<information>Doc 1(Title: Zorblat) The zorblat is a purple fruit grown on Oskel.</information>\n"
    )
    env = _env("purple", env_config=_published(small_server.url, topk=1, observation_format="passages"))
    assert "Doc 1(Title: Zorblat)" in env.step("<search>zorblat fruit</search>").observations[0]["content"]
    assert small_server.requests[-1] == {"query": "zorblat fruit", "topk": 1, "return_scores": True}
    local = _env("Harrowby", env_config={"observation_format": "published", "topk": 1})
    content = local.step("<search>inventor of the tidewheel</search>").observations[0]["content"]
    assert content.startswith('\n<information>{"result": "Doc 1: \\"') and "Marisol Quent" in content


def test_a_server_that_wants_the_other_request_format_is_named_in_the_error(small_server):
    """SkyRL's server rejects ``{"queries": ...}`` with a 422 (and Search-R1's rejects ``query``)."""
    small_server.fail_next = [422]
    env = _env(env_config=_published(small_server.url))
    with pytest.raises(RetrievalError, match="set request_format='queries'; now 'query'") as info:
        env.step("<search>zorblat</search>")
    assert info.value.last_status == 422 and len(small_server.requests) == 1
