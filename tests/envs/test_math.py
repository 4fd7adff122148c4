import pytest

import skyrl_gym
from skyrl_gym.envs.math import (
    answers_equal,
    extract_boxed,
    extract_gsm8k_answer,
    generate_problems,
    parse_number,
)
from skyrl_gym.errors import ConfigError

EQUIVALENT = [
    ("72", "72"),
    ("72.0", "72"),
    ("72.00", "72"),
    ("1,000", "1000"),
    ("$1,000.00", "1000"),
    ("-3", "-3.0"),
    ("0.5", "1/2"),
    ("\\frac{1}{2}", "0.5"),
    ("\\dfrac{3}{4}", "0.75"),
    ("\\tfrac34", "3/4"),
    ("\\frac{6}{8}", "\\frac{3}{4}"),
    ("1\\frac{1}{2}", "3/2"),
    ("50%", "0.5"),
    ("50\\%", "1/2"),
    ("\\boxed{42}", "42"),
    ("The answer is \\boxed{\\frac{2}{3}}", "2/3"),
    ("x = 5", "5"),
    ("5 apples", "5"),
    ("\\text{5}", "5"),
    ("$5$", "5"),
    ("2\\cdot 3", "6"),
    ("2 \\times 10^{3}", "2000"),
    ("1e3", "1000"),
    ("0.1+0.2", "0.3"),
    ("(1, 2)", "(1,2)"),
    ("[\\frac12, 3]", "(0.5, 3)"),
    ("\\left(1,2\\right)", "(1, 2)"),
    ("\\sqrt{2}", "\\sqrt2"),
    ("\\text{(A)}", "(A)"),
    ("Paris", "paris"),
    ("7.", "7"),
]

DIFFERENT = [
    ("7", "8"),
    ("0.33", "1/3"),
    ("1/2", "2"),
    ("(1, 2)", "(2, 1)"),
    ("(1, 2)", "(1, 2, 3)"),
    ("abc", "5"),
    ("", "0"),
    (None, "0"),
    ("5", None),
    ("2^{1000000}", "0"),
    ("\\frac{1}{0}", "1"),
]


@pytest.mark.parametrize("pred, truth", EQUIVALENT)
def test_equivalent_answers(pred, truth):
    assert answers_equal(pred, truth)
    assert answers_equal(truth, pred)


@pytest.mark.parametrize("pred, truth", DIFFERENT)
def test_different_answers(pred, truth):
    assert not answers_equal(pred, truth)


def test_parse_number_is_exact_and_safe():
    assert parse_number("0.1") * 3 == parse_number("0.3")
    assert parse_number("9**9**9**9") is None  # no huge powers
    assert parse_number("__import__('os')") is None
    assert parse_number("x" * 10_000) is None


def test_extractors():
    assert extract_boxed("a \\boxed{\\frac{1}{2}} b \\boxed{3}") == "3"
    assert extract_boxed("\\boxed{a{b}c}") == "a{b}c"
    assert extract_boxed("\\boxed{unclosed") is None
    assert extract_boxed("none") is None
    assert extract_gsm8k_answer("step\n#### 1,234.") == "1234"
    assert extract_gsm8k_answer("#### 1\n#### $-5") == "-5"
    assert extract_gsm8k_answer("no marker 5") is None


def test_generated_problems_are_correct_and_deterministic():
    rows = generate_problems(50, split="train")
    assert rows == generate_problems(50, split="train")
    assert {r["id"] for r in rows}.isdisjoint({r["id"] for r in generate_problems(50, split="test")})
    assert len({r["question"] for r in rows}) == 50
    for row in rows:
        # the worked solution's final number is the ground truth, and the env agrees
        env = skyrl_gym.make("gsm8k", extras=row)
        env.init(row["prompt"])
        assert env.step(row["answer"]).reward == 1.0


def test_gsm8k_single_turn():
    env = skyrl_gym.make("gsm8k", extras={"reward_spec": {"ground_truth": "18"}})
    out = env.step("9 * 2 = 18\n#### 18.0")
    assert (out.reward, out.done, out.metadata["parsed_answer"]) == (1.0, True, "18.0")
    env = skyrl_gym.make("gsm8k", extras={"reward_spec": {"ground_truth": "18"}})
    out = env.step("it is 18")
    assert (out.reward, out.metadata["error"]) == (0.0, "format")
    assert env.get_metrics() == {"correct": False, "formatted": False}


def test_gsm8k_multi_turn_feedback_and_per_turn_reward():
    env = skyrl_gym.make("gsm8k_multi_turn", extras={"reward_spec": {"ground_truth": "10"}, "max_turns": 3})
    out = env.step("no idea")
    assert out.reward == 0.0 and not out.done and "####" in out.observations[0]["content"]
    out = env.step("#### 9")
    assert out.reward == pytest.approx(0.2 / 3) and "9 is not correct" in out.observations[0]["content"]
    out = env.step("#### 10")
    assert (out.reward, out.done, out.truncated) == (1.0, True, False)
    assert env.get_metrics() == {"steps": 3, "solved": True}
    agg = env.aggregate_metrics([{"steps": 3, "solved": True}, {"steps": 5, "solved": False}])
    assert agg == {"avg_steps": 4.0, "solve_rate": 0.5}


def test_gsm8k_multi_turn_turn_limit():
    env = skyrl_gym.make("gsm8k_multi_turn", extras={"reward_spec": {"ground_truth": "10"}, "max_turns": 2})
    env.step("#### 1")
    out = env.step("#### 2")
    assert out.done and out.truncated and out.observations == []


def test_missing_reward_spec_is_a_config_error():
    with pytest.raises(ConfigError, match="reward_spec"):
        skyrl_gym.make("gsm8k", extras={})


def test_rows_from_a_datasets_dataset():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(
        [{"question": "What is 2+3?", "answer": "2+3=5\n#### 5"}, {"question": "1+1?", "answer": "#### 2"}]
    )
    from skyrl_gym.envs.math import rows_from_gsm8k

    rows = rows_from_gsm8k(ds)
    assert [r["reward_spec"]["ground_truth"] for r in rows] == ["5", "2"]
    assert rows[0]["prompt"][0]["content"].startswith("What is 2+3?")
