"""The prompt sampler's stratified order (``--stratify-by``): every row once per epoch, each kind
spread evenly, resumable, and the plain shuffle unchanged when it is off."""

import random
import re
from collections import Counter

import pytest

from skyrl_agent.types import PromptItem
from skyrl_gym.envs.calculator import SHAPES, generate_calculator_rows
from skyrl_gym.errors import ConfigError
from trainers.config import TrainConfig
from trainers.data import PromptSampler, load_items, stratify_key


def _rows(sizes: dict[str, int]) -> list[PromptItem]:
    rows = [
        PromptItem("calculator", (), extras={"kind": kind}, prompt_id=f"{kind}-{i}")
        for kind, n in sizes.items()
        for i in range(n)
    ]
    random.Random(1).shuffle(rows)
    return rows


def _worst_window_error(kinds: list[str], shares: dict[str, float]) -> float:
    """The largest gap, over every window of consecutive draws and every kind, between the kind's
    count in the window and the window's length times the kind's share."""
    worst = 0.0
    for start in range(len(kinds)):
        counts: Counter = Counter()
        for end in range(start, len(kinds)):
            counts[kinds[end]] += 1
            m = end - start + 1
            worst = max(worst, *(abs(counts[k] - m * share) for k, share in shares.items()))
    return worst


@pytest.mark.parametrize("sizes", [{"a": 25, "b": 25, "c": 25, "d": 25}, {"x": 6, "y": 30, "z": 64}])
@pytest.mark.parametrize("seed", [0, 3])
def test_each_kind_is_spread_evenly_through_every_epoch(sizes, seed):
    rows = _rows(sizes)
    total = sum(sizes.values())
    shares = {k: n / total for k, n in sizes.items()}
    sampler = PromptSampler(rows, seed=seed, stratify_by="kind")
    epochs = [sampler.next(total) for _ in range(3)]
    for epoch in epochs:
        assert sorted(r.prompt_id for r in epoch) == sorted(r.prompt_id for r in rows)  # each row once
        assert _worst_window_error([r.extras["kind"] for r in epoch], shares) <= 2.0
    assert [r.prompt_id for r in epochs[0]] != [r.prompt_id for r in epochs[1]]  # reshuffled per epoch


def test_a_plain_shuffle_leaves_a_kind_out_of_long_stretches():
    """What stratifying is for: the same rows in plain shuffled order put one kind far from its share
    (the bound above fails), so the stratified test above can tell the two apart."""
    rows = _rows({"a": 25, "b": 25, "c": 25, "d": 25})
    plain = [r.extras["kind"] for r in PromptSampler(rows, seed=0).next(100)]
    assert _worst_window_error(plain, dict.fromkeys("abcd", 0.25)) > 2.0


def test_without_stratify_by_the_order_is_the_seeded_shuffle_it_always_was():
    rows = _rows({"a": 7, "b": 5})
    expected = list(range(12))
    random.Random("4-0").shuffle(expected)
    got = PromptSampler(rows, seed=4).next(12)
    assert [r.prompt_id for r in got] == [rows[i].prompt_id for i in expected]
    assert "stratify_by" not in PromptSampler(rows, seed=4).state_dict()  # old checkpoints still load


def test_resume_continues_the_stratified_order_and_refuses_another_key():
    rows = _rows({"a": 9, "b": 14})
    first = PromptSampler(rows, seed=2, stratify_by="kind")
    first.next(30)  # into the second epoch
    state = first.state_dict()
    again = PromptSampler(rows, seed=2, stratify_by="kind")
    again.load_state_dict(state)
    assert [r.prompt_id for r in again.next(25)] == [r.prompt_id for r in first.next(25)]
    with pytest.raises(ConfigError, match="resume with --stratify-by kind"):
        PromptSampler(rows, seed=2).load_state_dict(state)
    with pytest.raises(ConfigError, match="resume with --stratify-by none"):
        PromptSampler(rows, seed=2, stratify_by="kind").load_state_dict(
            PromptSampler(rows, seed=2).state_dict()
        )


def test_a_row_without_the_field_is_a_config_error_naming_it():
    rows = [*_rows({"a": 3}), PromptItem("calculator", (), extras={}, prompt_id="bare")]
    with pytest.raises(ConfigError, match=r"'bare' has no field 'kind'"):
        PromptSampler(rows, stratify_by="kind")


def test_calculator_rows_name_their_shape_and_stratify_by_it():
    rows = generate_calculator_rows(200, seed=5)
    for row in rows:
        assert row["shape"] in SHAPES
        assert re.sub(r"\d+", "N", row["expr"]) == re.sub(r"[abc]", "N", row["shape"])
    items = load_items("calculator", "train", 200, seed=5)
    counts = Counter(i.extras["shape"] for i in items)
    shares = {k: n / len(items) for k, n in counts.items()}
    order = [i.extras["shape"] for i in PromptSampler(items, seed=5, stratify_by="shape").next(200)]
    assert _worst_window_error(order, shares) <= 2.0
    # every step of 4 prompts sees at least 3 of the 4 shapes, every step of the main job's 8 all 4
    assert all(len(set(order[k : k + 4])) >= 3 for k in range(0, 200, 4))
    assert all(len(set(order[k : k + 8])) == 4 for k in range(0, 200, 8))


def test_auto_is_the_envs_field_for_its_bundled_rows_only():
    assert TrainConfig().data.stratify_by == "auto"
    assert stratify_key("auto", "calculator", None) == "shape"  # CalculatorEnv.bundled_stratify_by
    assert stratify_key("auto", "calculator", "rows.jsonl") is None  # a data file: the user says
    assert stratify_key("auto", "gsm8k", None) is None  # an env that names no field
    assert stratify_key("none", "calculator", None) is None
    assert stratify_key("data_source", "calculator", "rows.jsonl") == "data_source"

    import argparse

    from trainers.cli import add_command

    p = argparse.ArgumentParser()
    add_command(p.add_subparsers())
    assert p.parse_args(["train", "--stratify-by", "none"]).stratify_by == "none"
