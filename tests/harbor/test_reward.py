"""Reward files: Harbor's rules, and every bad case is an error, never 0."""

from __future__ import annotations

import pytest

from harbor_adapter.errors import RewardError, TrialError
from harbor_adapter.reward import parse_reward


@pytest.mark.parametrize(
    ("json_bytes", "txt_bytes", "reward", "metrics"),
    [
        (None, b"1\n", 1.0, {"reward": 1.0}),
        (None, b" 0.25 ", 0.25, {"reward": 0.25}),
        (b'{"reward": 0.5, "tests": 3}', None, 0.5, {"reward": 0.5, "tests": 3.0}),
        (b'{"score": 0.75}', None, 0.75, {"score": 0.75}),
        (b"1", None, 1.0, {"reward": 1.0}),
        (b'{"reward": 0}', b"1", 0.0, {"reward": 0.0}),  # reward.json wins over reward.txt
    ],
)
def test_good_rewards(json_bytes, txt_bytes, reward, metrics):
    assert parse_reward(json_bytes, txt_bytes) == (reward, metrics)


@pytest.mark.parametrize(
    ("json_bytes", "txt_bytes", "message"),
    [
        (None, None, "no reward file"),
        (None, b"", "empty"),
        (None, b"  \n", "empty"),
        (None, b"passed", "non-numeric"),
        (None, b"nan", "non-finite"),
        (None, b"inf", "non-finite"),
        (None, b"-Infinity", "non-finite"),
        (b"", None, "empty"),
        (b"{", None, "not JSON"),
        (b'{"reward": NaN}', None, "non-finite"),
        (b'{"reward": Infinity}', None, "non-finite"),
        (b'{"reward": "1"}', None, "non-numeric"),
        (b'{"reward": true}', None, "non-numeric"),
        (b"{}", None, "empty object"),
        (b'{"a": 1, "b": 0}', None, "no 'reward' key"),
        (b"[1]", None, "non-numeric"),
    ],
)
def test_bad_rewards_are_errors(json_bytes, txt_bytes, message):
    with pytest.raises(RewardError, match=message) as info:
        parse_reward(json_bytes, txt_bytes)
    assert isinstance(info.value, TrialError) and isinstance(info.value, RuntimeError)


def test_steps_combine_by_the_tasks_strategy():
    from harbor_adapter.reward import combine_steps
    from harbor_adapter.types import RewardStrategy

    steps = [(1.0, {"reward": 1.0, "lint": 1.0}), (0.5, {"reward": 0.5})]
    assert combine_steps(steps, RewardStrategy.MEAN) == (
        0.75,
        {"lint": 0.5, "reward": 0.75},
    )  # lint: 0 for step 2
    assert combine_steps(steps, RewardStrategy.FINAL) == (0.5, {"reward": 0.5})
    with pytest.raises(RewardError, match="no step"):
        combine_steps([], RewardStrategy.MEAN)
