import json

import pytest

import skyrl_gym
from skyrl_gym.envs.calculator import generate_calculator_rows


def _env(truth="449", **extras):
    return skyrl_gym.make("calculator", extras={"reward_spec": {"ground_truth": truth}, **extras})


def call(expr):
    return f"<tool_call>{json.dumps({'name': 'calc', 'arguments': {'expr': expr}})}</tool_call>"


def test_solved_episode_scores_one():
    env = _env()
    out = env.step(call("37 * 12 + 5"))
    assert out.observations == [{"role": "user", "content": "<tool_response>449</tool_response>"}]
    assert out.reward == pytest.approx(0.2) and not out.done
    out = env.step("<answer>449</answer>")
    assert out.reward == pytest.approx(0.8) and out.done and out.truncated is False
    assert env.get_metrics() == {"called_tool": True, "answered": True, "correct": True}


@pytest.mark.parametrize(
    "action, kind, text",
    [
        ("<tool_call>{not json</tool_call>", "parse_error", "invalid JSON"),
        ('<tool_call>{"name": "sqrt", "arguments": {"expr": "4"}}</tool_call>', "unknown_tool", "calc"),
        ('<tool_call>{"name": "calc", "arguments": {"x": "4"}}</tool_call>', "invalid_arguments", "expr"),
        (call("import os"), "tool_error", "not an arithmetic expression"),
        (call("9**9**9**9"), "tool_error", "not an arithmetic expression"),
        (call("1+" * 150 + "1"), "tool_error", "at most 200 characters"),
    ],
)
def test_model_mistakes_become_observations(action, kind, text):
    env = _env()
    out = env.step(action)
    assert text in out.observations[0]["content"]
    assert out.metadata["tool_call"]["error"] == kind
    assert out.reward == 0.0 and not out.done


def test_arguments_as_json_string_and_wrong_answer():
    env = _env()
    args = json.dumps({"expr": "37*12+5"})
    out = env.step(f'<tool_call>{{"name": "calc", "arguments": {json.dumps(args)}}}</tool_call>')
    assert "449" in out.observations[0]["content"]
    out = env.step("<answer>450</answer>")
    assert out.reward == 0.0 and out.done


@pytest.mark.parametrize(
    "answer, correct",
    [
        ("449", True),
        (" 449 ", True),
        ("449.0", True),
        ("1,449", False),
        ("37 * 12 + 5", False),  # the question's expression has the right value, but is no answer
        ("(37*12)+5", False),
        ("449 + 0", False),
        ("4.49e2", False),
        ("448", False),
    ],
)
def test_only_a_number_answers(answer, correct):
    env = _env()
    out = env.step(f"<answer>{answer}</answer>")
    assert out.done and out.reward == (pytest.approx(0.8) if correct else 0.0)
    assert env.get_metrics()["correct"] is correct


def test_thousands_separators_are_a_number():
    env = _env(truth="1204")
    assert env.step("<answer>1,204</answer>").reward == pytest.approx(0.8)


def test_turn_limit_truncates():
    env = _env()
    env.step("hmm")
    out = env.step("still thinking")
    assert out.done and out.truncated and out.reward == 0.0


def test_rows_are_correct_and_split():
    rows = generate_calculator_rows(40)
    test_rows = generate_calculator_rows(40, split="test")
    assert {r["id"] for r in rows}.isdisjoint({r["id"] for r in test_rows})
    for row in rows[:10]:
        env = skyrl_gym.make("calculator", extras=row)
        env.init(row["prompt"])
        assert row["expr"] in row["prompt"][-1]["content"]
        assert env.tools.calc(row["expr"]) == row["reward_spec"]["ground_truth"]


def test_worked_examples_are_right_and_replaceable():
    from skyrl_gym.envs.calculator import _EXAMPLES

    tools = skyrl_gym.make("calculator", extras={"reward_spec": {"ground_truth": "1"}}).tools
    shapes = set()
    for question, expr, value in _EXAMPLES:
        assert expr in question and tools.calc(expr) == str(value)
        shapes.add("(" in expr)
    assert shapes == {True, False}  # both parenthesis habits are shown
    default = generate_calculator_rows(2)[0]["prompt"]
    assert len(default) == 2 + 4 * len(_EXAMPLES)
    assert default[-2]["content"] == f"<answer>{_EXAMPLES[-1][2]}</answer>"
    mine = (("What is 2 + 3 * 4?", "2 + 3 * 4", 14),)
    prompt = generate_calculator_rows(2, examples=mine)[0]["prompt"]
    assert [m["content"] for m in prompt[1:5]] == [
        "What is 2 + 3 * 4?",
        call("2 + 3 * 4"),
        "<tool_response>14</tool_response>",
        "<answer>14</answer>",
    ]
    assert prompt[-1] == default[-1]  # same question, other examples
