"""The ``ask_user`` env: a simulated user (offline rules, or a model through LiteLLM against a real
OpenAI-compatible server on 127.0.0.1) supplies the user turns."""

from __future__ import annotations

import pytest

import skyrl_gym
from skyrl_gym.envs.judge import (
    LLMErrorKind,
    SimulatedUserError,
    generate_ask_user_rows,
    scripted_reply,
)
from skyrl_gym.errors import ConfigError
from tests._openai_stub_server import OpenAIStubServer, last_user_text

ROW = generate_ask_user_rows(3, split="train")[0]  # a paint task


def _env(env_config=None, row=ROW, **extras):
    env = skyrl_gym.make("ask_user", env_config=env_config, extras={**row, **extras})
    env.init(row["prompt"])
    return env


def _fact(row, keyword):
    return next(f["fact"] for f in row["user_facts"] if keyword in f["keywords"])


def test_generated_rows_are_consistent():
    train, test = generate_ask_user_rows(30, split="train"), generate_ask_user_rows(30, split="test")
    assert {r["id"] for r in train}.isdisjoint({r["id"] for r in test})
    assert generate_ask_user_rows(30, split="train") == train  # seeded
    for row in train:
        assert row["env_class"] == "ask_user" and row["prompt"][-1]["content"] == row["user_request"]
        assert int(row["reward_spec"]["ground_truth"]) > 0 and len(row["user_facts"]) == 3


def test_scripted_user_episode():
    env = _env()
    out = env.step("How big are the walls?")
    assert out.observations == [{"role": "user", "content": _fact(ROW, "area")}] and not out.done
    out = env.step("What does the paint tin say?")
    assert "covers" in out.observations[0]["content"]
    out = env.step("Tell me a joke.")
    assert "more specific" in out.observations[0]["content"]
    out = env.step(f"You need <answer>{ROW['reward_spec']['ground_truth']} litres</answer>")
    assert out.done and out.reward == 1.0 and out.truncated is False
    assert env.get_metrics() == {
        "turns": 4,
        "answered": True,
        "correct": True,
        "user_attempts": 0,
        "user_error": False,
    }


def test_wrong_answer_and_turn_limit():
    assert _env().step("<answer>9999</answer>").reward == 0.0
    env = _env(max_turns=2)
    env.step("hello")
    out = env.step("still thinking")
    assert out.done and out.truncated and out.reward == 0.0


def test_configuration_errors():
    with pytest.raises(ConfigError, match="user_model"):
        _env({"user": "llm"})
    with pytest.raises(ConfigError, match="user_facts"):
        skyrl_gym.make("ask_user", extras={"reward_spec": {"ground_truth": "3"}})
    assert scripted_reply("HOW MANY COATS?", ROW["user_facts"]) == _fact(ROW, "coat")


@pytest.fixture
def server():
    with OpenAIStubServer(default_reply="I don't know.") as s:
        s.reply_when("walls", _fact(ROW, "area"))
        yield s


def _cfg(server, **kw):
    cfg = {"user": "llm", "user_model": "openai/stub-user", "api_base": server.base_url, "backoff_s": 0.01}
    cfg.update(kw)
    return cfg


def test_llm_user_gets_the_conversation_with_roles_flipped(server):
    env = _env(_cfg(server))
    out = env.step("How big are the walls?")
    assert out.observations == [{"role": "user", "content": _fact(ROW, "area")}]
    out = env.step("And the weather?")
    assert out.observations[0]["content"] == "I don't know."
    body = server.requests[-1]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "assistant", "user", "assistant", "user"]
    assert _fact(ROW, "coat") in body["messages"][0]["content"]  # the private facts are in the prompt
    assert (
        body["messages"][1]["content"] == ROW["user_request"] and last_user_text(body) == "And the weather?"
    )
    assert body["model"] == "stub-user" and env.get_metrics()["user_attempts"] == 2


def test_llm_user_retries_then_fails_loudly(server):
    server.fail_next(503)
    env = _env(_cfg(server, max_retries=1))
    assert env.step("How big are the walls?").observations[0]["content"] == _fact(ROW, "area")
    assert env.get_metrics()["user_attempts"] == 2
    server.fail_next(500, 500)
    with pytest.raises(SimulatedUserError) as info:
        env.step("How big are the walls?")
    assert info.value.kind == LLMErrorKind.SERVER and info.value.attempts == 2
    assert env.get_metrics()["user_error"] is True and env.user_error_record["attempts"] == 2


def test_long_messages_are_capped_for_the_user_model(server):
    env = _env(_cfg(server, max_message_chars=500))
    env.step("\x00" + "y" * (1 << 20) + " walls")
    sent = last_user_text(server.requests[0])
    assert len(sent) <= 500 and "\x00" not in sent and sent.endswith("walls")


def test_check_env_passes_with_the_llm_user(server):
    example = skyrl_gym.spec("ask_user").load().example()
    report = skyrl_gym.check_env(
        lambda: skyrl_gym.make("ask_user", env_config=_cfg(server), extras=dict(example.extras))
    )
    assert "good actions earn reward" in report.checks and server.requests
