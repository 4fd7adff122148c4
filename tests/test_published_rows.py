"""Dataset rows written for the published skyrl-gym run here unchanged: through ``skyrl_gym.make``
(graded by the published reward rules), through ``skyrl rollout`` and through ``skyrl train``.

One row per published env id (text2sql, search, gsm8k, lcb, aime), in the columns of the
published datasets (SkyRL-SQL, Search-R1, GSM8K, LiveCodeBench, AIME): ``data_source``,
``prompt``, ``env_class``, ``reward_spec`` (AIME's ``reward_model``), ``extra_info`` and the
env's own columns. Their env settings come the published way, one section per env class
(``--env-config text2sql.db_path=... search.search_url=...``), never inside the rows. Real parts
only: a SQLite file in the Spider layout, a retrieval server on 127.0.0.1, the local sandbox
for LiveCodeBench tests, and for the runs a tiny random model with the bundled tokenizer."""

from __future__ import annotations

import argparse
import json
import sqlite3

import pytest

import skyrl_gym
from skyrl_agent.io import load_jsonl
from skyrl_agent.tasks import load_tasks, with_env_config
from skyrl_gym.config import parse_env_config
from skyrl_gym.envs.search.types import Passage
from tests.envs.test_search import RetrievalServer

CORPUS = [
    Passage("p1", "Oskel", "The capital of Oskel is Varnhold, a city on the river Tess."),
    Passage("p2", "Tess", "The river Tess is the longest river of Oskel."),
]
LCB_TESTS = [
    {"input": "3 4\n", "output": "7\n", "testtype": "stdin", "metadata": {}},
    {"input": "10 -2\n", "output": "8\n", "testtype": "stdin", "metadata": {}},
]


def _rows() -> list[dict]:
    sys_sql = "Answer with <think>...</think> then <sql>...</sql> to explore, and <solution>...</solution>."
    return [
        {
            "data_source": "spider",
            "prompt": [
                {"role": "system", "content": sys_sql},
                {"role": "user", "content": "Database: shop. How many orders are there?"},
            ],
            "env_class": "text2sql",
            "reward_spec": {"method": "rule", "ground_truth": "SELECT COUNT(*) FROM orders"},
            "db_id": "shop",
            "data": "spider",
            "extra_info": {"index": 0},
        },
        {
            "data_source": "nq",
            "prompt": [{"role": "user", "content": "Use <search>q</search>, answer in <answer>. What is the capital of Oskel?"}],
            "env_class": "search",
            "reward_spec": {"method": "rule", "ground_truth": {"target": ["Varnhold"]}},
            "extra_info": {"index": 1, "split": "test"},
        },
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": "Tom has 3 apples and buys 4 more. How many? End with '#### <n>'."}],
            "env_class": "gsm8k",
            "reward_spec": {"method": "rule", "ground_truth": "7"},
            "extra_info": {"index": 2},
        },
        {
            "data_source": "livecodebench",
            "prompt": [{"role": "user", "content": "Read two integers and print their sum. Answer in a ```python block."}],
            "env_class": "lcb",
            "reward_spec": {"method": "rule", "ground_truth": json.dumps(LCB_TESTS)},
            "extra_info": {"index": 3},
        },
        {
            "data_source": "aime",
            "prompt": [{"role": "user", "content": "What is 20 + 22? End with 'Answer: <n>'."}],
            "env_class": "aime",
            "reward_model": {"style": "rule", "ground_truth": "42"},
            "extra_info": {"index": 4},
        },
    ]  # fmt: skip


#: A right final action for each row, and the reward the published rule gives it.
RIGHT = {
    "text2sql": ("<think>Count the rows.</think>\n<solution>SELECT COUNT(*) FROM orders</solution>", 1.0),
    "search": ("<answer>Varnhold</answer>", 1.0),
    "gsm8k": ("3 + 4 = 7\n#### 7", 1.0),
    "lcb": ("```python\na, b = map(int, input().split())\nprint(a + b)\n```", 1.0),
    "aime": ("20 + 22 = 42.\nAnswer: 42", 1.0),
}
#: A wrong final action and its reward (AIME's rule is +1 / -1, the others 1 / 0).
WRONG = {
    "text2sql": ("<think>Guess.</think>\n<solution>SELECT 99</solution>", 0.0),
    "search": ("<answer>Tess</answer>", 0.0),
    "gsm8k": ("#### 8", 0.0),
    "lcb": ("```python\nprint(0)\n```", 0.0),
    "aime": ("Answer: 41", -1.0),
}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """(rows file, env-config items) with a Spider-layout database and a retrieval server."""
    root = tmp_path_factory.mktemp("published")
    db = root / "sql_data" / "spider" / "database" / "shop" / "shop.sqlite"
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT, qty INTEGER)")
        conn.executemany("INSERT INTO orders (item, qty) VALUES (?, ?)", [("pen", 2), ("ink", 1), ("pad", 5)])
    conn.close()
    path = root / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    with RetrievalServer(CORPUS) as server:
        yield (
            path,
            (
                f"text2sql.db_path={root / 'sql_data'}",
                f"search.search_url={server.url}",
                "search.topk=2",
                "search.timeout=10",
            ),
        )


def _env(item):
    return skyrl_gym.make(item.env_id, env_config=item.env_config, extras=item.extras)


@pytest.mark.parametrize("which", [RIGHT, WRONG], ids=["right", "wrong"])
def test_published_rows_are_graded_by_the_published_rules(published, which):
    path, env_config = published
    items = with_env_config(load_tasks(path), parse_env_config(env_config))
    assert [i.env_id for i in items] == ["text2sql", "search", "gsm8k", "lcb", "aime"]
    for item in items:
        env = _env(item)
        try:
            env.init(list(item.prompt))
            if item.env_id == "search":  # read the passage first, as the task intends
                out = env.step("<search>capital of Oskel</search>")
                assert not out.done and "Varnhold" in out.observations[0]["content"]
            action, reward = which[item.env_id]
            out = env.step(action)
            assert out.done, (item.env_id, out)
            assert out.reward == reward, (item.env_id, action, out)
        finally:
            env.close()


def _rollout(argv):
    from skyrl_agent.cli import add_rollout_command

    parser = argparse.ArgumentParser(prog="skyrl")
    add_rollout_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.handler(args)


@pytest.mark.slow
def test_published_rows_run_through_skyrl_rollout(published, tmp_path):
    path, env_config = published
    out = tmp_path / "trajs.jsonl"
    # no --env: each row's env_class picks its env
    argv = ["rollout", "--prompts", str(path), "--model", "tiny-random", "--n", "2", "--max-turns", "2"]
    argv += ["--max-tokens", "8", "--threads", "1", "--quiet", "--out", str(out), "--env-config", *env_config]
    assert _rollout(argv) == 0
    trajs = load_jsonl(out)
    assert sorted(t.env_id for t in trajs) == sorted(["text2sql", "search", "gsm8k", "lcb", "aime"] * 2)
    assert not [t for t in trajs if t.masked], [(t.env_id, t.error) for t in trajs if t.masked]
    # a random model answers nothing right: each env's rule gives its "wrong" reward
    for t in trajs:
        assert t.reward == WRONG[t.env_id][1] or (t.env_id == "aime" and t.reward == -1.0), (
            t.env_id,
            t.reward,
        )


@pytest.mark.slow
def test_published_rows_train_with_skyrl_train(published, tmp_path):
    from skyrl_agent.models import tiny_random_model
    from trainers.config import TrainConfig
    from trainers.loop import train
    from trainers.metrics import read_jsonl

    path, env_config = published
    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    cfg = TrainConfig(
        model=str(tmp_path / "model"), run_dir=str(tmp_path / "run"), data=str(path), eval_data=str(path),
        env_config=env_config, steps=1, prompts_per_step=5, group_size=2, train_prompts=0, eval_prompts=5,
        eval_samples=1, max_turns=2, max_tokens_per_turn=8, bf16=False, progress=False, threads=1,
        skip_equal_reward_groups=False, temperature=1.0,
    )  # fmt: skip
    result = train(cfg)
    assert result.steps == 1
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    (step,) = [r for r in records if r["kind"] == "train"]
    assert step["episodes"] == 10 and step["masked"] == 0, step
    trajs = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert sorted({t["env_id"] for t in trajs}) == ["aime", "gsm8k", "lcb", "search", "text2sql"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["final"]["episodes"] == 5 and summary["final"]["masked"] == 0, summary
