import re
from collections import Counter

import pytest

import skyrl_gym
from skyrl_gym.envs._generated import split_of
from skyrl_gym.envs.bisect import (
    _EXAMPLES,
    BisectEnv,
    bisection_guesses,
    build_bisect_prompt,
    generate_bisect_rows,
    marks_of,
    min_budget,
)
from skyrl_gym.errors import ConfigError


def game(lo, hi, target, **extras):
    return {"lo": lo, "hi": hi, "reward_spec": {"ground_truth": target}, **extras}


def _make(row, env_config=None):
    env = skyrl_gym.make("bisect", env_config=env_config or {}, extras=row)
    prompt = row.get("prompt", [{"role": "user", "content": "Find the number."}])
    messages, _ = env.init(prompt)
    return env, messages


def play_bisection(env, messages):
    """A bisecting policy that knows only what the model sees: the range in the question, then
    the feedback."""
    low, high = (int(x) for x in re.search(r"from (-?\d+) to (-?\d+)", messages[-1]["content"]).groups())
    steps = []
    while True:
        guess = (low + high) // 2
        out = env.step(f"<guess>{guess}</guess>")
        steps.append(out)
        if out.done:
            return steps
        feedback = out.observations[0]["content"]
        if feedback.startswith("higher"):
            low = guess + 1
        else:
            assert feedback.startswith("lower")
            high = guess - 1


@pytest.mark.parametrize("size", [2, 3, 7, 8, 31, 32, 33, 63, 64, 100, 1000])
def test_bisection_always_fits_the_minimum_budget(size):
    assert min_budget(size) == max(len(bisection_guesses(1, size, t)) for t in range(1, size + 1))
    assert 2 ** (min_budget(size) - 1) <= size < 2 ** min_budget(size)  # ceil(log2(size + 1))


def test_bisecting_policy_wins_every_game_of_a_range_within_the_budget():
    lo, hi = 24, 55
    for target in range(lo, hi + 1):
        env, messages = _make(game(lo, hi, target, prompt=build_bisect_prompt(lo, hi, 6)))
        assert env.max_turns == 6 == min_budget(32)
        steps = play_bisection(env, messages)
        assert len(steps) == len(bisection_guesses(lo, hi, target)) <= 6
        assert steps[-1].reward == 1.0 and steps[-1].metadata["feedback"] == "correct"
        assert not steps[-1].truncated and all(s.metadata["consistent"] for s in steps)
        assert env.get_metrics()["consistent_fraction"] == 1.0 and env.get_metrics()["success"] is True


@pytest.mark.parametrize("row", generate_bisect_rows(10, split="test"), ids=lambda r: r["id"])
def test_bisecting_policy_wins_the_bundled_rows(row):
    env, messages = _make(row)
    steps = play_bisection(env, messages)
    assert steps[-1].reward == 1.0 and len(steps) == row["depth"] <= row["budget"] == 6


def test_a_policy_that_ignores_feedback_wins_at_most_budget_over_size():
    lo, hi, size = 10, 41, 32
    sequences = {
        "distinct": [10, 20, 30, 40, 15, 25],
        "repeats": [26, 26, 26, 30, 30, 12],
        "out of range": [5, 50, 11, 12, 13, 14],
    }
    wins = {}
    for name, guesses in sequences.items():
        wins[name] = 0
        for target in range(lo, hi + 1):
            env, _ = _make(game(lo, hi, target))
            for guess in guesses:
                out = env.step(f"<guess>{guess}</guess>")
                if out.done:
                    break
            wins[name] += env.get_metrics()["success"]
    assert wins == {"distinct": 6, "repeats": 3, "out of range": 4}  # of 32 targets
    assert max(wins.values()) / size <= 6 / 32


def test_targets_are_uniform_over_each_range():
    rows = generate_bisect_rows(3200, split="train")
    offsets = Counter(r["reward_spec"]["ground_truth"] - r["lo"] for r in rows)
    assert set(offsets) == set(range(32))
    assert max(offsets.values()) < 2 * min(offsets.values())  # 100 expected each


def test_consistency_by_hand():
    env, _ = _make(game(1, 8, 6), {"budget": 8})
    script = [
        ("<guess>4</guess>", 4, "higher", True, None),  # allowed: 1..8 -> 5..8
        ("<guess>3</guess>", 3, "higher", False, None),  # below what "higher than 4" allows
        ("<guess>8</guess>", 8, "lower", True, None),  # allowed: 5..8 -> 5..7
        ("<guess>4</guess>", 4, "higher", False, None),  # a repeat
        ("<guess>9</guess>", 9, None, False, "out_of_range"),
        ("<guess>six</guess>", None, None, False, "bad_guess"),
        ("<guess> 6 </guess>", 6, "correct", True, None),
    ]
    for action, guess, feedback, consistent, error in script:
        out = env.step(action)
        meta = out.metadata
        assert (meta["guess"], meta["feedback"], meta["consistent"], meta.get("error")) == (
            guess,
            feedback,
            consistent,
            error,
        )
    assert out.done and out.reward == 1.0
    assert env.get_metrics() == {
        "success": True,
        "guesses": 5,
        "consistent_guesses": 3,
        "consistent_fraction": 3 / 7,
        "middle_guesses": 2,  # 4 (middle of 1..8) and 6 (middle of 5..7)
        "turns": 7,
        "budget": 8,
        "size": 8,
        "depth": 2,
    }


@pytest.mark.parametrize(
    "action, error, text",
    [
        (
            "I guess 17",
            "no_guess",
            "Reply with <guess>N</guess>, a whole number from 1 to 32. Guesses left: 5.",
        ),
        ("<guess>seventeen</guess>", "bad_guess", "Reply with <guess>N</guess>"),
        ("<guess>17.5</guess>", "bad_guess", "Reply with <guess>N</guess>"),
        ("<guess>" + "9" * 5000 + "</guess>", "bad_guess", "Reply with <guess>N</guess>"),
        ("<guess>0</guess>", "out_of_range", "0 is not from 1 to 32. Guesses left: 5."),
        ("<guess>-3</guess>", "out_of_range", "-3 is not from 1 to 32"),
    ],
)
def test_malformed_actions_are_observations_that_use_a_turn(action, error, text):
    env, _ = _make(game(1, 32, 17))
    out = env.step(action)
    assert out.metadata["error"] == error and out.metadata["consistent"] is False
    assert out.observations == [{"role": "user", "content": out.observations[0]["content"]}]
    assert text in out.observations[0]["content"] and out.reward == 0.0 and not out.done
    assert env.turns == 1 and env.get_metrics()["guesses"] == 0


def test_feedback_text():
    env, _ = _make(game(1, 32, 17))
    assert env.step("<guess>16</guess>").observations[0]["content"] == (
        "higher: the number is more than 16. Guesses left: 5."
    )
    assert env.step("<guess>24</guess>").observations[0]["content"] == (
        "lower: the number is less than 24. Guesses left: 4."
    )


def test_interval_feedback_restates_what_the_answers_leave():
    env, _ = _make(game(1, 32, 17), {"feedback": "interval"})
    texts = [env.step(f"<guess>{g}</guess>").observations[0]["content"] for g in (16, 24, 3, 20)]
    assert texts == [
        "higher: the number is more than 16, so it is from 17 to 32. Guesses left: 5.",
        "lower: the number is less than 24, so it is from 17 to 23. Guesses left: 4.",
        "higher: the number is more than 3, so it is from 17 to 23. Guesses left: 3.",  # an inconsistent guess
        "lower: the number is less than 20, so it is from 17 to 19. Guesses left: 2.",
    ]
    assert env.step("<guess>17</guess>").reward == 1.0


def test_guess_reward_pays_consistent_wrong_guesses_on_their_turn_only():
    plain, _ = _make(game(1, 32, 17))
    assert plain.step("<guess>16</guess>").reward == 0.0  # off by default
    env, _ = _make(game(1, 32, 17), {"guess_reward": 0.1})
    rewards = [env.step(f"<guess>{g}</guess>").reward for g in (16, 3, 40, 24, 24, 17)]
    # consistent, below the bound, out of range, consistent, a repeat, the target
    assert rewards == [0.1, 0.0, 0.0, 0.1, 0.0, 1.0]


def test_split_guess_reward_pays_for_what_a_guess_rules_out():
    env, _ = _make(game(1, 32, 17), {"guess_reward": 0.1, "guess_reward_by": "split"})
    # 1..32 left: 16 rules out at least 16 (1..16 or 16..32), over half of 32: 16 / 16; then
    # 17..32: 24 rules out at least 8 (17..24), over half of 16: 8 / 8; 17 is the target
    assert env.step("<guess>16</guess>").reward == pytest.approx(0.1)
    assert env.step("<guess>24</guess>").reward == pytest.approx(0.1)
    assert env.step("<guess>3</guess>").reward == 0.0  # outside what the feedback left
    scan, _ = _make(game(1, 32, 30), {"guess_reward": 0.1, "guess_reward_by": "split"})
    assert scan.step("<guess>1</guess>").reward == pytest.approx(0.1 / 16)  # a scan step rules out 1
    assert scan.step("<guess>2</guess>").reward == pytest.approx(0.1 / 16)  # 1 of the 31 left
    assert env.step("<guess>17</guess>").reward == 1.0


def test_interval_feedback_writes_its_worked_examples_in_its_own_style():
    row = generate_bisect_rows(1, split="test")[0]  # one plain example in the row's prompt
    env, messages = _make(row, {"feedback": "interval"})
    assert messages == build_bisect_prompt(row["lo"], row["hi"], 6, examples=1, feedback="interval")
    shown = [m["content"] for m in messages[2:-1] if m["role"] == "user"]
    assert shown and all(", so it is from " in text for text in shown)
    # the example's answers are what the env says to the example's guesses
    lo, hi, target = _EXAMPLES[0]
    example_env, _ = _make(game(lo, hi, target), {"feedback": "interval"})
    guesses = [m["content"] for m in messages[2:-1] if m["role"] == "assistant"]
    assert [example_env.step(g).observations[0]["content"] for g in guesses[:-1]] == shown
    _, three = _make(row, {"feedback": "interval", "examples": 3})
    assert three == build_bisect_prompt(row["lo"], row["hi"], 6, examples=3, feedback="interval")
    # a bisecting policy still wins reading only what the model sees
    assert play_bisection(env, messages)[-1].reward == 1.0


def test_middle_always_names_the_middle_left_and_bisection_copies_it():
    row = generate_bisect_rows(1, split="test")[0]
    env, messages = _make(row, {"feedback": "interval", "middle": "always", "examples": 2})
    assert messages == build_bisect_prompt(
        row["lo"], row["hi"], 6, examples=2, feedback="interval", middle="always"
    )
    lo, hi, target = row["lo"], row["hi"], row["reward_spec"]["ground_truth"]
    assert (
        messages[-1]["content"]
        == f"Find the number from {lo} to {hi} (middle: {(lo + hi) // 2}). You have 6 guesses."
    )
    # every worked example guesses the middle its question or the answer before named
    named = None
    for m in messages[1:-1]:
        if m["role"] == "user":
            named = int(m["content"].rsplit("(middle: ", 1)[1].split(")", 1)[0])
        else:
            assert m["content"] == f"<guess>{named}</guess>"
    # a policy that copies the middle the last observation names plays midpoint bisection
    seen, outs = messages[-1]["content"], []
    while not outs or not outs[-1].done:
        middle = int(seen.rsplit("(middle: ", 1)[1].split(")", 1)[0])
        outs.append(env.step(f"<guess>{middle}</guess>"))
        seen = outs[-1].observations[0]["content"] if outs[-1].observations else ""
    assert [o.metadata["guess"] for o in outs] == bisection_guesses(lo, hi, target)
    assert outs[-1].reward == 1.0 and all(o.metadata["middle"] for o in outs)
    assert env.get_metrics()["middle_guesses"] == len(outs)
    wrong, _ = _make(game(1, 16, 3), {"feedback": "interval", "middle": "always"})
    assert wrong.step("<guess>8</guess>").observations[0]["content"] == (
        "lower: the number is less than 8, so it is from 1 to 7 (middle: 4). Guesses left: 4."
    )
    assert wrong.step("<guess>1</guess>").metadata["middle"] is False  # consistent, not the middle
    # middle=question names it only in the question (and the examples' questions)
    _, asked = _make(row, {"feedback": "interval", "middle": "question", "examples": 1})
    assert "(middle: " in asked[-1]["content"] and "(middle: " in asked[1]["content"]
    assert not any("(middle: " in m["content"] for m in asked[2:-1] if m["role"] == "user")
    with pytest.raises(ConfigError, match="needs feedback=interval"):
        _make(row, {"middle": "always"})
    with pytest.raises(ConfigError, match="middle must be one of none, question, always"):
        _make(row, {"middle": "yes"})


def test_marks_by_hand():
    assert marks_of(1, 32, 7) == [1, 6, 11, 16, 21, 26, 32]
    assert marks_of(17, 23, 5) == [17, 18, 20, 21, 23]
    assert marks_of(21, 23, 7) == [21, 22, 23]  # fewer numbers than marks: each once
    assert marks_of(5, 5, 3) == [5]
    for lo in range(1, 12):
        for hi in range(lo, lo + 70):
            for count in (3, 5, 7, 9):
                marks = marks_of(lo, hi, count)
                assert marks[0] == lo and marks[-1] == hi and marks == sorted(set(marks))
                assert len(marks) == min(count, hi - lo + 1)
                assert marks[(len(marks) - 1) // 2] == (lo + hi) // 2  # the middle mark bisects
    with pytest.raises(ValueError, match="odd"):
        marks_of(1, 9, 4)


def test_marks_list_the_range_left_and_the_middle_mark_bisects():
    row = generate_bisect_rows(1, split="test")[0]
    env, messages = _make(row, {"feedback": "interval", "marks": 5, "examples": 2})
    assert messages == build_bisect_prompt(row["lo"], row["hi"], 6, examples=2, feedback="interval", marks=5)
    lo, hi, target = row["lo"], row["hi"], row["reward_spec"]["ground_truth"]
    listed = ", ".join(map(str, marks_of(lo, hi, 5)))
    assert (
        messages[-1]["content"] == f"Find the number from {lo} to {hi} (marks: {listed}). You have 6 guesses."
    )

    def marks_in(text):
        return [int(x) for x in text.rsplit("(marks: ", 1)[1].split(")", 1)[0].split(", ")]

    # every worked example guesses the middle mark of the question or answer before it
    for before, after in zip(messages[1:-1], messages[2:-1], strict=False):
        if before["role"] == "user" and after["role"] == "assistant":
            marks = marks_in(before["content"])
            assert after["content"] == f"<guess>{marks[(len(marks) - 1) // 2]}</guess>"
    # a policy that guesses the middle mark the last observation lists plays midpoint bisection
    seen, outs = messages[-1]["content"], []
    while not outs or not outs[-1].done:
        marks = marks_in(seen)
        outs.append(env.step(f"<guess>{marks[(len(marks) - 1) // 2]}</guess>"))
        seen = outs[-1].observations[0]["content"] if outs[-1].observations else ""
    assert [o.metadata["guess"] for o in outs] == bisection_guesses(lo, hi, target)
    assert outs[-1].reward == 1.0 and env.get_metrics()["middle_guesses"] == len(outs)
    wrong, _ = _make(game(1, 16, 3), {"feedback": "interval", "marks": 3})
    assert wrong.step("<guess>8</guess>").observations[0]["content"] == (
        "lower: the number is less than 8, so it is from 1 to 7 (marks: 1, 4, 7). Guesses left: 4."
    )
    with pytest.raises(ConfigError, match="needs feedback=interval and middle=none"):
        _make(row, {"marks": 5})
    with pytest.raises(ConfigError, match="needs feedback=interval and middle=none"):
        _make(row, {"marks": 5, "feedback": "interval", "middle": "question"})
    for bad in (4, 1, 11):
        with pytest.raises(ConfigError, match="marks"):
            _make(row, {"marks": bad, "feedback": "interval"})


def test_budget_spent_ends_the_episode_unsolved():
    env, _ = _make(game(1, 32, 17))
    outs = [env.step("<guess>1</guess>") for _ in range(6)]
    assert [o.done for o in outs] == [False] * 5 + [True]
    assert outs[-1].truncated and outs[-1].observations == [] and outs[-1].reward == 0.0
    assert env.get_metrics()["success"] is False and env.get_metrics()["consistent_fraction"] == 1 / 6


def test_rows_are_deterministic_and_seeded():
    assert generate_bisect_rows(20, seed=3) == generate_bisect_rows(20, seed=3)
    assert generate_bisect_rows(5, seed=3) == generate_bisect_rows(20, seed=3)[:5]
    assert [r["lo"] for r in generate_bisect_rows(10, seed=3)] != [
        r["lo"] for r in generate_bisect_rows(10, seed=4)
    ]
    assert BisectEnv.bundled_rows("test", 7, 2) == generate_bisect_rows(7, split="test", seed=2)
    assert len(BisectEnv.bundled_rows("train")) == 400


def test_train_and_held_out_share_no_range_under_any_seeds():
    ranges = {
        split: {
            (r["lo"], r["hi"])
            for seed in (0, 1, 2)
            for r in generate_bisect_rows(300, split=split, seed=seed)
        }
        for split in ("train", "test")
    }
    assert ranges["train"].isdisjoint(ranges["test"])
    assert len(ranges["train"]) > 30 and len(ranges["test"]) > 30
    for split, spans in ranges.items():
        assert {split_of(f"bisect:{lo}-{hi}") for lo, hi in spans} == {split}
        assert all(1 <= lo <= 100 and hi == lo + 31 for lo, hi in spans)
    with pytest.raises(ConfigError, match="unknown split"):
        BisectEnv.bundled_rows("dev")


def test_rows_name_their_depth_for_stratifying():
    rows = generate_bisect_rows(200)
    assert BisectEnv.bundled_stratify_by == "depth"
    for row in rows:
        assert row["depth"] == len(
            bisection_guesses(row["lo"], row["hi"], row["reward_spec"]["ground_truth"])
        )
    depths = Counter(r["depth"] for r in rows)
    assert set(depths) <= {1, 2, 3, 4, 5, 6} and depths[5] > depths[4] > depths[3]  # 16, 8, 4 targets of 32


def test_worked_examples_are_bisection_plays():
    prompt = build_bisect_prompt(1, 32, 6, examples=3)
    assert len(prompt) == 2 + sum(2 * len(bisection_guesses(*ex)) for ex in _EXAMPLES)
    for lo, hi, target in _EXAMPLES:
        env, messages = _make(game(lo, hi, target, prompt=build_bisect_prompt(lo, hi, 6, examples=0)))
        steps = play_bisection(env, messages)
        assert steps[-1].reward == 1.0
    # the prompt's example turns are what the env says to those guesses
    env, _ = _make(game(*_EXAMPLES[0]))
    shown = prompt[2 : 1 + 2 * len(bisection_guesses(*_EXAMPLES[0]))]
    for guess_msg, feedback_msg in zip(shown[0::2], shown[1::2], strict=False):
        assert env.step(guess_msg["content"]).observations[0]["content"] == feedback_msg["content"]


def test_examples_and_budget_settings_write_the_prompt():
    row = generate_bisect_rows(1, split="test")[0]
    for count in range(4):
        _, messages = _make(row, {"examples": count})
        assert messages == build_bisect_prompt(row["lo"], row["hi"], 6, examples=count)
    _, messages = _make(row)
    assert messages == row["prompt"]
    env, messages = _make(row, {"budget": 9})
    assert env.max_turns == 9 and messages[:-1] == row["prompt"][:-1]
    assert messages[-1]["content"] == f"Find the number from {row['lo']} to {row['hi']}. You have 9 guesses."


def test_difficulty_from_env_config_draws_the_game_again():
    row = generate_bisect_rows(1, split="test")[0]
    env, messages = _make(row, {"size": 64})
    assert env.size == 64 and env.budget == 7 == env.max_turns
    assert split_of(f"bisect:{env.lo}-{env.hi}") == "test"
    assert messages[-1]["content"] == f"Find the number from {env.lo} to {env.hi}. You have 7 guesses."
    steps = play_bisection(env, messages)
    assert steps[-1].reward == 1.0 and len(steps) <= 7
    again, _ = _make(row, {"size": 64})
    assert (again.lo, again.hi, again.target) == (env.lo, env.hi, env.target)
    same, _ = _make(row, {"size": 32, "max_start": 100})  # the row's own difficulty: the row's game
    assert (same.lo, same.hi, same.target) == (row["lo"], row["hi"], row["reward_spec"]["ground_truth"])
    fixed, messages = _make(row, {"max_start": 10, "size": 16})
    assert 1 <= fixed.lo <= 10 and fixed.size == 16 and fixed.budget == 5


@pytest.mark.parametrize(
    "env_config, match",
    [
        ({"budjet": 6}, "Did you mean 'budget'"),
        ({"budget": 0}, "at least 1"),
        ({"size": 1}, "at least 2"),
        ({"examples": 4}, "from 0 to 3"),
        ({"feedback": "intervals"}, "plain, interval"),
        ({"feedback": 1}, "plain, interval"),
        ({"guess_reward": 2}, "from 0 to 1"),
        ({"guess_reward": "lots"}, "from 0 to 1"),
        ({"guess_reward_by": "halving"}, "consistent, split"),
    ],
)
def test_misconfiguration_raises(env_config, match):
    row = generate_bisect_rows(1, split="test")[0]
    with pytest.raises(ConfigError, match=match):
        skyrl_gym.make("bisect", env_config=env_config, extras=row)


def test_a_split_without_a_range_is_said_not_looped_on():
    # the only range 1..32 belongs to one split; asking the other split for it raises
    other = "test" if split_of("bisect:1-32") == "train" else "train"
    row = generate_bisect_rows(1, split=other)[0]
    with pytest.raises(ConfigError, match="raise max_start"):
        skyrl_gym.make("bisect", env_config={"max_start": 1}, extras=row)
    with pytest.raises(ConfigError, match="raise max_start"):
        generate_bisect_rows(1, split=other, max_start=1)


def test_bad_rows_raise():
    with pytest.raises(ConfigError, match="'lo'"):
        skyrl_gym.make("bisect", extras={"reward_spec": {"ground_truth": 3}})
    with pytest.raises(ConfigError, match="not in the row's range"):
        skyrl_gym.make("bisect", extras=game(1, 8, 9))
    with pytest.raises(ConfigError, match="seed"):
        skyrl_gym.make("bisect", env_config={"size": 8}, extras=game(1, 8, 3))


def test_worked_examples_are_games_of_the_question_s_size_and_budget():
    from skyrl_gym.envs.bisect import _example_games

    assert _example_games(3) == list(_EXAMPLES)  # the bundled size: the games as they always were
    for size, budget in ((16, 4), (8, 3), (64, 7), (100, 4)):
        games = _example_games(3, size, budget)
        assert [g[0] for g in games] == [ex[0] for ex in _EXAMPLES]
        for lo, hi, target in games:
            assert hi - lo + 1 == size and lo <= target <= hi
            assert len(bisection_guesses(lo, hi, target)) <= budget  # every example is won
        prompt = build_bisect_prompt(200, 200 + size - 1, budget, examples=3, feedback="interval")
        questions = [m["content"] for m in prompt if m["role"] == "user" and m["content"].startswith("Find")]
        assert all(q.endswith(f"You have {budget} guesses.") for q in questions)
    row = generate_bisect_rows(1, split="test")[0]
    env, messages = _make(row, {"size": 16, "budget": 4, "examples": 2})
    assert messages[1]["content"] == "Find the number from 1 to 16. You have 4 guesses."
    assert _example_games(1, 8, 1) == [(1, 8, 4)]  # one guess: only the midpoint can be an example
    with pytest.raises(ConfigError, match="within 0 guesses"):
        _example_games(1, 8, 0)
