import json
import re
from collections import Counter

import pytest

import skyrl_gym
from skyrl_gym.envs._generated import split_of
from skyrl_gym.envs.kvchain import (
    _EXAMPLES,
    _PROMPT_TEXT,
    HOPS,
    KVChainEnv,
    build_kvchain_prompt,
    generate_kvchain_rows,
    make_kvchain_instance,
)
from skyrl_gym.errors import ConfigError

# start aa1a -> bb2b -> cc3c -> answer 1234; aa1a also names the old key dd4d (answer 9999)
TABLE = {
    "aa1a": "next key: bb2b; old key: dd4d",
    "bb2b": "next key: cc3c",
    "cc3c": "answer: 1234",
    "dd4d": "answer: 9999",
}
SMALL = {"table": TABLE, "start_key": "aa1a", "reward_spec": {"ground_truth": "1234"}}


def lookup(key):
    return f"<tool_call>{json.dumps({'name': 'lookup', 'arguments': {'key': key}})}</tool_call>"


def _make(row, env_config=None):
    env = skyrl_gym.make("kvchain", env_config=env_config or {}, extras=row)
    messages, _ = env.init(row.get("prompt", [{"role": "user", "content": "Start at key aa1a."}]))
    return env, messages


def play_by_reading(env, messages):
    """A perfect policy that knows only what the model sees: the start key in the question, then
    the 'next key' of each observation, then the answer in the last one."""
    key = re.search(r"key ([a-z0-9]{4})", messages[-1]["content"]).group(1)
    steps = []
    while True:
        out = env.step(lookup(key))
        steps.append(out)
        value = out.observations[0]["content"]
        answer = re.search(r"answer: (\d+)", value)
        if answer:
            steps.append(env.step(f"<answer>{answer.group(1)}</answer>"))
            return steps
        key = re.search(r"next key: ([a-z0-9]+)", value).group(1)


@pytest.mark.parametrize("row", generate_kvchain_rows(12, split="test"), ids=lambda r: f"k{r['k']}")
def test_perfect_policy_succeeds_in_exactly_k_plus_one_turns(row):
    env, messages = _make(row)
    steps = play_by_reading(env, messages)
    assert len(steps) == row["k"] + 1 == env.turns
    assert [s.metadata["hop_followed"] for s in steps] == [True] * row["k"] + [False]
    assert [s.metadata["hops_followed"] for s in steps[:-1]] == list(range(1, row["k"] + 1))
    assert [s.reward for s in steps] == [0.0] * row["k"] + [1.0]
    assert steps[-1].done and not steps[-1].truncated and not any(s.done for s in steps[:-1])
    metrics = env.get_metrics()
    assert metrics == {
        "success": True,
        "answered": True,
        "k": row["k"],
        "hops_needed": row["k"],
        "hops_followed": row["k"],
        "lookups": row["k"],
        "decoy_lookups": 0,
        "unknown_lookups": 0,
        f"success_k{row['k']}": True,
    }


def test_answering_without_lookups_fails():
    rows = generate_kvchain_rows(30, split="test")
    for row in rows:
        # every number the model could copy from its prompt, and the first one there, are wrong
        for guess in {*re.findall(r"\d{4}", _PROMPT_TEXT), "1000"}:
            env, _ = _make(row)
            out = env.step(f"<answer>{guess}</answer>")
            assert out.done and out.reward == 0.0 and env.get_metrics()["success"] is False
            assert env.get_metrics()["hops_followed"] == 0 and env.turns == 1


def test_following_the_old_key_gives_a_wrong_answer():
    env, _ = _make(SMALL)
    env.step(lookup("aa1a"))
    out = env.step(lookup("dd4d"))
    assert out.observations[0]["content"] == "<tool_response>answer: 9999</tool_response>"
    assert out.metadata["hop_followed"] is False
    out = env.step("<answer>9999</answer>")
    assert out.reward == 0.0 and out.done
    assert env.get_metrics()["decoy_lookups"] == 1 and env.get_metrics()["hops_followed"] == 1


def test_hop_metric_by_hand():
    env, _ = _make(SMALL, {"max_turns": 10})
    script = [
        ("aa1a", True, 1),  # named by the prompt
        ("dd4d", False, 1),  # an old key: exists, not on the chain
        ("zz9z", False, 1),  # unknown
        ("cc3c", False, 1),  # on the chain, but not the next key (bb2b is)
        ("aa1a", False, 1),  # already read
        ("bb2b", True, 2),
        ("cc3c", True, 3),
        ("cc3c", False, 3),  # the chain is done
    ]
    for key, followed, so_far in script:
        out = env.step(lookup(key))
        assert (out.metadata["key"], out.metadata["hop_followed"], out.metadata["hops_followed"]) == (
            key,
            followed,
            so_far,
        )
    out = env.step("<answer> 1234 </answer>")
    assert out.reward == 1.0 and out.done
    assert env.get_metrics() == {
        "success": True,
        "answered": True,
        "k": 3,
        "hops_needed": 3,
        "hops_followed": 3,
        "lookups": 8,
        "decoy_lookups": 1,
        "unknown_lookups": 1,
        "success_k3": True,
    }
    aggregate = KVChainEnv.aggregate_metrics([env.get_metrics(), {"success": False, "success_k5": False}])
    assert aggregate["success_k3"] == 1.0 and aggregate["success_k5"] == 0.0 and aggregate["success"] == 0.5


def test_hop_reward_shaping_is_off_by_default():
    env, _ = _make(SMALL)
    assert env.step(lookup("aa1a")).reward == 0.0
    env, _ = _make(SMALL, {"hop_reward": 0.1})
    rewards = [env.step(lookup(k)).reward for k in ("aa1a", "dd4d", "bb2b", "cc3c")]
    assert rewards == [0.1, 0.0, 0.1, 0.1]
    assert env.step("<answer>1234</answer>").reward == 1.0


@pytest.mark.parametrize(
    "action, kind, text",
    [
        ("I think the answer is 1234.", "no_tool_call", "Reply with a <tool_call> or an <answer>."),
        ("<tool_call>{not json</tool_call>", "parse_error", "invalid JSON"),
        ('<tool_call>{"name": "get", "arguments": {"key": "aa1a"}}</tool_call>', "unknown_tool", "lookup"),
        ('<tool_call>{"name": "lookup", "arguments": {"k": "aa1a"}}</tool_call>', "invalid_arguments", "key"),
        (lookup("zz9z"), "tool_error", "no key 'zz9z' in the table"),
        (lookup("x" * 5000), "tool_error", "no key"),
    ],
)
def test_model_mistakes_become_observations(action, kind, text):
    env, _ = _make(SMALL)
    out = env.step(action)
    assert out.metadata["error"] == kind and out.metadata["hop_followed"] is False
    assert text in out.observations[0]["content"] and len(out.observations[0]["content"]) < 500
    assert out.reward == 0.0 and not out.done


def test_one_lookup_a_turn():
    env, _ = _make(SMALL)
    out = env.step(lookup("aa1a") + lookup("bb2b"))
    assert out.observations[0]["content"] == "<tool_response>next key: bb2b; old key: dd4d</tool_response>"
    assert env.tools.keys_asked == ["aa1a"] and env.get_metrics()["hops_followed"] == 1


def test_turn_budget_is_k_plus_two_and_truncates():
    row = generate_kvchain_rows(3, split="train")[2]  # k = 5
    env, _ = _make(row)
    assert env.max_turns == row["k"] + 2 == 7
    outs = [env.step("let me think") for _ in range(7)]
    assert [o.done for o in outs] == [False] * 6 + [True]
    assert outs[-1].truncated and outs[-1].observations == [] and env.get_metrics()["success"] is False
    assert skyrl_gym.make("kvchain", env_config={"max_turns": 3}, extras=row).max_turns == 3


def test_rows_are_deterministic_and_seeded():
    assert generate_kvchain_rows(20, seed=3) == generate_kvchain_rows(20, seed=3)
    assert generate_kvchain_rows(5, seed=3) == generate_kvchain_rows(20, seed=3)[:5]
    assert generate_kvchain_rows(5, seed=3)[0]["table"] != generate_kvchain_rows(5, seed=4)[0]["table"]
    assert KVChainEnv.bundled_rows("test", 7, 2) == generate_kvchain_rows(7, split="test", seed=2)
    assert len(KVChainEnv.bundled_rows("train")) == 400


def test_rows_mix_k_and_name_it_for_stratifying():
    rows = generate_kvchain_rows(60)
    assert Counter(r["k"] for r in rows) == {k: 10 for k in HOPS}
    assert KVChainEnv.bundled_stratify_by == "k"
    for row in rows[:12]:
        env, _ = _make(row)
        assert env.k == row["k"] and len(env.chain) == row["k"]
        assert len(row["table"]) > row["k"]  # old-key branches are there
        assert sum("old key" in v for v in row["table"].values()) == 2


def _keys(rows):
    return {key for row in rows for key in row["table"]}


def test_train_and_held_out_share_no_key_under_any_seeds():
    train = [r for seed in (0, 1) for r in generate_kvchain_rows(150, split="train", seed=seed)]
    test = [r for seed in (0, 1) for r in generate_kvchain_rows(150, split="test", seed=seed)]
    assert _keys(train).isdisjoint(_keys(test))
    assert {split_of(f"kvchain:{k}") for k in _keys(train)} == {"train"}
    assert {split_of(f"kvchain:{k}") for k in _keys(test)} == {"test"}
    assert {r["id"] for r in train}.isdisjoint({r["id"] for r in test})
    with pytest.raises(ConfigError, match="unknown split"):
        KVChainEnv.bundled_rows("validation")


def test_nothing_is_guessable_before_the_last_observation():
    rows = generate_kvchain_rows(600, split="train") + generate_kvchain_rows(600, split="test")
    answers = Counter()
    for row in rows:
        env, messages = _make(row, {"examples": 3})
        prompt = "\n".join(m["content"] for m in messages)
        truth = row["reward_spec"]["ground_truth"]
        answers[truth] += 1
        assert truth not in prompt and 1000 <= int(truth) <= 9999
        # the answer is written in exactly one value: the last of the chain
        assert [k for k, v in row["table"].items() if truth in v] == [env.chain[-1]]
        # the key of hop i + 1 is written only in the value of hop i
        for i in range(1, row["k"]):
            assert [k for k, v in row["table"].items() if env.chain[i] in v] == [env.chain[i - 1]]
        assert not any(key in prompt for key in env.chain[1:])
        keys = list(row["table"])
        assert all(re.fullmatch(r"(?=.*\d)(?=.*[a-z])[a-z0-9]{4}", k) for k in keys)
    # answers spread over 9000 numbers: a constant guess is right about once in 9000 episodes
    assert max(answers.values()) <= 3 and len(answers) > 1100


def test_examples_setting_writes_the_prompt():
    row = generate_kvchain_rows(1, split="test")[0]
    assert len(row["prompt"]) == 2 + (2 + 2 * len(_EXAMPLES[0][1]))  # system, one example, question
    for count in range(4):
        _, messages = _make(row, {"examples": count})
        assert messages == build_kvchain_prompt(row["start_key"], examples=count)
    _, messages = _make(row)
    assert messages == row["prompt"]
    with pytest.raises(ConfigError, match="from 0 to 3"):
        skyrl_gym.make("kvchain", env_config={"examples": 4}, extras=row)


def test_worked_examples_are_right():
    for start, values, answer in _EXAMPLES:
        table, key = {}, start
        for value in values:
            table[key] = value
            nxt = re.search(r"next key: ([a-z0-9]+)", value)
            key = nxt.group(1) if nxt else key
        env, messages = _make({"table": table, "start_key": start}, {"max_turns": 10})
        steps = play_by_reading(env, [{"role": "user", "content": f"Start at key {start}."}])
        assert steps[-1].reward == 1.0 and env.answer == answer


@pytest.mark.parametrize("hops", [4, [4], "4-4"])
def test_difficulty_from_env_config_draws_the_chain_again(hops):
    row = generate_kvchain_rows(1, split="test")[0]
    assert row["k"] == 3
    env, messages = _make(row, {"hops": hops, "distractors": 0})
    assert env.k == 4 and len(env.tools.table) == 4 and env.tools.table != row["table"]
    assert env.chain[0] in messages[-1]["content"] and env.answer != row["reward_spec"]["ground_truth"]
    assert {split_of(f"kvchain:{k}") for k in env.tools.table} == {"test"}
    steps = play_by_reading(env, messages)
    assert len(steps) == 5 and steps[-1].reward == 1.0
    again, _ = _make(row, {"hops": hops, "distractors": 0})
    assert again.tools.table == env.tools.table  # deterministic
    # the row's own difficulty draws the row's own chain
    same, _ = _make(row, {"hops": row["k"], "distractors": row["distractors"]})
    assert same.tools.table == row["table"]


def test_a_redrawn_chain_renames_the_start_key_in_the_question():
    row = generate_kvchain_rows(1, split="test")[0]
    row = {**row, "prompt": [{"role": "user", "content": "Start at key zz0z."}], "start_key": "zz0z"}
    row["table"] = {"zz0z": "answer: 1"}
    row["reward_spec"] = {"ground_truth": "1"}
    env, messages = _make(row, {"hops": 3})
    assert messages == [{"role": "user", "content": f"Start at key {env.chain[0]}."}]


def test_hops_range_mixes_chain_lengths():
    rows = generate_kvchain_rows(40, split="train")
    ks = Counter(_make(row, {"hops": "5-6"})[0].k for row in rows)
    assert set(ks) == {5, 6}


@pytest.mark.parametrize(
    "env_config, match",
    [
        ({"exmaples": 0}, "Did you mean 'examples'"),
        ({"hops": "three"}, "hops"),
        ({"hops": [0]}, "hops"),
        ({"distractors": 9}, "from 0 to 8"),
        ({"examples": "x"}, "whole number"),
    ],
)
def test_misconfiguration_raises(env_config, match):
    row = generate_kvchain_rows(1)[0]
    with pytest.raises(ConfigError, match=match):
        skyrl_gym.make("kvchain", env_config=env_config, extras=row)


def test_bad_rows_raise():
    with pytest.raises(ConfigError, match="'table'"):
        skyrl_gym.make("kvchain", extras={"reward_spec": {"ground_truth": "1"}})
    with pytest.raises(ConfigError, match="not the answer"):
        skyrl_gym.make("kvchain", extras={**SMALL, "reward_spec": {"ground_truth": "9999"}})
    with pytest.raises(ConfigError, match="loops"):
        skyrl_gym.make("kvchain", extras={"table": {"aa1a": "next key: aa1a"}, "start_key": "aa1a"})
    with pytest.raises(ConfigError, match="seed"):
        skyrl_gym.make("kvchain", env_config={"hops": 4}, extras=SMALL)


def test_instances_use_only_their_split_and_fresh_keys():
    start, table, answer = make_kvchain_instance("s", "train", 6, 8)
    assert sum("old key" in v for v in table.values()) == 6  # at most one branch per chain value
    assert len(set(table)) == len(table) and start in table
    assert {split_of(f"kvchain:{k}") for k in table} == {"train"}
    values = [v for v in table.values() if v.startswith("answer") or "; answer" in v]
    assert len({re.search(r"answer: (\d+)", v).group(1) for v in values}) == len(
        values
    )  # wrong answers differ
