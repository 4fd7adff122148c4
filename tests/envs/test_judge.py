"""The ``judge_qa`` env: the offline exact judge, verdict parsing, and the LiteLLM judge against a
real OpenAI-compatible server on 127.0.0.1 (verdicts, retries, permanent and unparsable failures)."""

from __future__ import annotations

import pickle
import re
import socket
import sys
import time

import pytest

import skyrl_gym
from skyrl_gym.envs.judge import (
    ExactJudge,
    JudgeConfig,
    JudgeError,
    JudgeErrorKind,
    LiteLLMJudge,
    build_messages,
    load_bundled_rows,
    parse_verdict,
)
from skyrl_gym.errors import ConfigError, MissingDependencyError, SkyRLError
from tests._openai_stub_server import OpenAIStubServer, last_user_text

REFERENCE = "Plants release oxygen; photosynthesis happens in the chloroplasts."
QUESTION = "Which gas do plants release during photosynthesis?"


def _student(body):
    """The student's answer as the judge request carries it."""
    match = re.search(r"<<<\n(.*)\n>>>", last_user_text(body), re.DOTALL)
    return match.group(1) if match else ""


@pytest.fixture
def server():
    with OpenAIStubServer(default_reply="The answer does not match.\nVERDICT: INCORRECT") as s:
        # a deterministic "grader": correct when the student's answer mentions oxygen
        s.rules.append(
            lambda body: "Mentions oxygen.\nVERDICT: CORRECT" if "oxygen" in _student(body).lower() else None
        )
        yield s


def _cfg(server, **kw):
    cfg = {
        "judge_model": "openai/stub-judge",
        "api_base": server.base_url,
        "backoff_s": 0.01,
        "max_backoff_s": 0.02,
        "timeout_s": 5.0,
        "max_retries": 2,
    }
    cfg.update(kw)
    return cfg


def _env(env_config, reference=REFERENCE, **extras):
    env = skyrl_gym.make(
        "judge_qa",
        env_config=env_config,
        extras={"reward_spec": {"ground_truth": {"reference": reference, "accept": ["oxygen"]}}, **extras},
    )
    env.init([{"role": "user", "content": QUESTION}])
    return env


# --------------------------------------------------------------------------- offline parts
@pytest.mark.parametrize(
    "reply, fmt, expected",
    [
        ("Looks right.\nVERDICT: CORRECT", "binary", (True, 1.0)),
        ("verdict: incorrect", "binary", (False, 0.0)),
        ("VERDICT: CORRECT ... on reflection\n**VERDICT: INCORRECT**", "binary", (False, 0.0)),  # last wins
        ("VERDICT: MAYBE", "binary", None),
        ("I think it is correct.", "binary", None),
        ("SCORE: 7", "score", (True, 0.7)),
        ("Score = 3/10", "score", (False, 0.3)),
        ("SCORE: 11", "score", None),
        ("VERDICT: CORRECT", "score", None),
    ],
)
def test_parse_verdict(reply, fmt, expected):
    assert parse_verdict(reply, fmt) == expected


def test_exact_judge_matches_whole_phrases():
    judge = ExactJudge()
    assert judge.grade(QUESTION, "oxygen", "They release Oxygen.").correct
    assert not judge.grade(QUESTION, "oxygen", "They release oxygenated water").correct
    assert judge.grade(QUESTION, "O2 gas", "oxygen!", accept=("oxygen",)).score == 1.0
    assert not judge.grade(QUESTION, "oxygen", "carbon dioxide").correct


def test_exact_judge_env_offline_and_bundled_rows():
    rows = load_bundled_rows("all")
    assert len(rows) == 20 and len(load_bundled_rows("test")) == 4
    for row in rows:
        env = skyrl_gym.make("judge_qa", env_config={"judge": "exact"}, extras=row)
        env.init(row["prompt"])
        assert env.question == row["question"]
        truth = row["reward_spec"]["ground_truth"]
        assert env.step(f"<answer>{truth['reference']}</answer>").reward == 1.0
    env = _env({"judge": "exact"})
    out = env.step("<answer>Carbon dioxide.</answer>")
    assert out.done and out.reward == 0.0 and out.metadata["correct"] is False


def test_configuration_errors_say_the_fix():
    with pytest.raises(ConfigError, match="judge='exact'"):
        _env({})  # the LLM judge needs a model
    with pytest.raises(ConfigError, match="'binary' or 'score'"):
        _env({"judge": "exact", "verdict": "stars"})
    with pytest.raises(ConfigError, match="reference"):
        skyrl_gym.make("judge_qa", env_config={"judge": "exact"}, extras={"reward_spec": {}})


def test_missing_litellm_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "litellm", None)  # import litellm now fails
    with pytest.raises(MissingDependencyError, match=r"skyrl-stack\[litellm\]"):
        LiteLLMJudge(JudgeConfig(judge_model="openai/x"))


def test_judge_error_pickles_and_is_an_infrastructure_error():
    err = JudgeError("boom", JudgeErrorKind.UNPARSABLE, 3)
    copy = pickle.loads(pickle.dumps(err))
    assert (str(copy), copy.kind, copy.attempts) == ("boom", JudgeErrorKind.UNPARSABLE, 3)
    assert isinstance(copy, SkyRLError) and isinstance(copy, RuntimeError)


def test_build_messages_keeps_the_answer_inside_delimiters():
    system, user = build_messages("Q?", "ref", "ans", "score")
    assert "SCORE: n" in system["content"] and user["content"].endswith("<<<\nans\n>>>")


# --------------------------------------------------------------------------- LLM judge, real HTTP
def test_correct_and_incorrect_verdicts(server):
    env = _env(_cfg(server))
    out = env.step("Thinking... <answer>They give off oxygen.</answer>")
    assert out.done and out.reward == 1.0 and out.metadata["correct"] is True
    assert out.metadata["judge_attempts"] == 1 and "VERDICT: CORRECT" in out.metadata["judge_reply"]
    body = server.requests[0]
    assert body["model"] == "stub-judge" and body["temperature"] == 0.0 and body["max_tokens"] == 512
    assert body["messages"][0]["role"] == "system" and "VERDICT: CORRECT" in body["messages"][0]["content"]
    assert REFERENCE in last_user_text(body) and QUESTION in last_user_text(body)
    assert env.get_metrics() == {
        "correct": True,
        "score": 1.0,
        "judge_calls": 1,
        "judge_attempts": 1,
        "judge_error": False,
    }
    env = _env(_cfg(server))
    out = env.step("<answer>nitrogen</answer>")
    assert out.reward == 0.0 and out.metadata["correct"] is False and len(server.requests) == 2


def test_score_verdict(server):
    server.rules.insert(0, lambda body: "Partly right.\nSCORE: 7")
    out = _env(_cfg(server, verdict="score")).step("<answer>oxygen, somewhere</answer>")
    assert out.reward == pytest.approx(0.7) and out.metadata["correct"] is True
    assert "SCORE: n" in server.requests[0]["messages"][0]["content"]


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_failure_then_success_is_retried(server, status):
    server.fail_next(status)
    env = _env(_cfg(server))
    out = env.step("<answer>oxygen</answer>")
    assert out.reward == 1.0 and out.metadata["judge_attempts"] == 2 and len(server.requests) == 2
    assert env.get_metrics()["judge_attempts"] == 2 and env.get_metrics()["judge_error"] is False


def test_permanent_failure_raises_and_is_recorded_not_scored(server):
    server.fail_next(500, 500, 500, 500)
    env = _env(_cfg(server, max_retries=2))
    with pytest.raises(JudgeError) as info:
        env.step("<answer>oxygen</answer>")
    assert info.value.kind == JudgeErrorKind.SERVER and info.value.attempts == 3
    assert len(server.requests) == 3  # our retries only: LiteLLM's and the OpenAI client's are off
    metrics = env.get_metrics()
    assert metrics["judge_error"] is True and metrics["judge_attempts"] == 3 and metrics["score"] == 0.0
    assert env.judge_error_record["kind"] == "server" and env.judge_error_record["attempts"] == 3


def test_unparsable_verdict_raises_without_retry(server):
    server.rules.insert(0, lambda body: "It is probably fine, I guess.")
    env = _env(_cfg(server))
    with pytest.raises(JudgeError, match="VERDICT") as info:
        env.step("<answer>oxygen</answer>")
    assert info.value.kind == JudgeErrorKind.UNPARSABLE and len(server.requests) == 1
    assert env.get_metrics()["judge_error"] is True


def test_a_400_is_rejected_without_retry(server):
    server.fail_next(400)
    with pytest.raises(JudgeError) as info:
        _env(_cfg(server)).step("<answer>oxygen</answer>")
    assert info.value.kind == JudgeErrorKind.REJECTED and len(server.requests) == 1


def test_a_slow_judge_times_out_and_is_retried(server):
    server.delay_next(3.0)
    start = time.monotonic()
    out = _env(_cfg(server, timeout_s=0.5)).step("<answer>oxygen</answer>")
    assert out.reward == 1.0 and out.metadata["judge_attempts"] == 2
    assert time.monotonic() - start < 2.5


def test_an_unreachable_judge_is_a_connection_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = {
        "judge_model": "openai/x",
        "api_base": f"http://127.0.0.1:{port}/v1",
        "max_retries": 1,
        "backoff_s": 0.01,
    }
    env = _env(cfg)
    with pytest.raises(JudgeError) as info:
        env.step("<answer>oxygen</answer>")
    assert info.value.kind == JudgeErrorKind.CONNECTION and info.value.attempts == 2


def test_garbage_is_capped_before_it_reaches_the_judge(server):
    env = _env(_cfg(server, max_answer_chars=1000))
    out = env.step("\x00" + "x" * (1 << 20) + " oxygen")
    sent = _student(server.requests[0])
    assert len(sent) <= 1000 and "\x00" not in sent and sent.endswith("oxygen")  # head and tail kept
    assert out.reward == 1.0
    empty = _env(_cfg(server))
    assert empty.step("<answer>\x00 </answer>").metadata == {"error": "empty_answer"}
    assert len(server.requests) == 1  # an empty answer is not sent


def test_check_env_passes_with_the_llm_judge(server):
    example = skyrl_gym.spec("judge_qa").load().example()
    server.rules.insert(0, lambda body: "VERDICT: CORRECT" if "lightning" in _student(body).lower() else None)
    report = skyrl_gym.check_env(
        lambda: skyrl_gym.make("judge_qa", env_config=_cfg(server), extras=dict(example.extras))
    )
    assert "good actions earn reward" in report.checks and len(server.requests) >= 5


def test_ground_truth_from_parquet_and_omegaconf_configs(server):
    np = pytest.importorskip("numpy")
    truth = {"reference": REFERENCE, "accept": np.array(["oxygen", "O2"], dtype=object)}
    env = skyrl_gym.make(
        "judge_qa", env_config={"judge": "exact"}, extras={"reward_spec": {"ground_truth": truth}}
    )
    assert env.accept == ("oxygen", "O2")
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create(_cfg(server, verdict="binary"))
    env = skyrl_gym.make("judge_qa", env_config=cfg, extras={"reward_spec": {"ground_truth": REFERENCE}})
    env.init([{"role": "user", "content": QUESTION}])
    assert env.step("oxygen").reward == 1.0 and env.config.judge_model == "openai/stub-judge"
