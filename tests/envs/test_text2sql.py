"""The text2sql env on the bundled databases (real SQLite throughout)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium
import pytest
from omegaconf import OmegaConf

import skyrl_gym
from skyrl_gym.envs.sql import (
    INVALID_ACTION_HINT,
    Text2SQLEnv,
    bundled_db_dir,
    bundled_questions,
    check_format,
    execute,
    grade,
    load_bundled_rows,
)
from skyrl_gym.errors import ConfigError

THINK = "<think>I will check.</think>"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return load_bundled_rows("all")


def _row(rows: list[dict], qid: str) -> dict:
    return next(r for r in rows if r["extra_info"]["id"] == qid)


def _episode(row: dict, actions: list[str], env_config: object = None) -> tuple[list, Text2SQLEnv]:
    env = skyrl_gym.make("text2sql", env_config=env_config or {}, extras=row)
    env.init(row["prompt"])
    outs = []
    for action in actions:
        out = env.step(action)
        outs.append(out)
        if out.done:
            break
    return outs, env


def test_check_env_passes():
    example = Text2SQLEnv.example()
    report = skyrl_gym.check_env(lambda: skyrl_gym.make("text2sql", extras=example.extras))
    assert "good actions earn reward" in report.checks
    env = skyrl_gym.make("text2sql", extras=example.extras)
    skyrl_gym.check_env(env)


def test_multi_turn_episode_with_observations_and_reward(rows):
    row = _row(rows, "library-05")  # books per genre
    gold = row["reward_spec"]["ground_truth"]
    outs, env = _episode(
        row,
        [
            f"{THINK}<sql>SELECT DISTINCT genre FROM books</sql>",
            f"{THINK}<sql>SELECT * FROM nowhere</sql>",
            f"<think>Done.</think><solution>{gold}</solution>",
        ],
    )
    first, second, last = outs
    text = first.observations[0]["content"]
    assert first.observations[0]["role"] == "user"
    assert text.startswith("\n\n<observation>genre\n") and "Poetry" in text
    assert "<reminder>You have 4 turns left to complete the task.</reminder></observation>" in text
    assert (first.reward, first.done, first.truncated) == (0.0, False, False)
    # The published metadata: the tool's arguments (db_id, the query as written, turns left).
    assert first.metadata["tool_group"] == "SQLCodeExecutorToolGroup" and first.metadata["tool_name"] == "sql"
    assert first.metadata["tool_input"] == ("library", "SELECT DISTINCT genre FROM books", 4)
    assert second.metadata["tool_input"] == ("library", "SELECT * FROM nowhere", 3)
    assert "Error: no such table: nowhere" in second.observations[0]["content"]
    assert "3 turns left" in second.observations[0]["content"]
    assert second.metadata["error"] == "error"
    assert (last.reward, last.done, last.truncated, last.observations) == (1.0, True, False, [])
    assert env.get_metrics() == {
        "turns": 3,
        "sql_calls": 2,
        "sql_errors": 1,
        "sql_refused": 0,
        "sql_timeouts": 0,
        "no_sql_turns": 0,
        "solved": True,
        "format_ok": True,
        "truncated": False,
        "grading_error": False,
        # the failed query was followed by a solution that ran; no schema query in this episode
        "exploration_queries": 0,
        "schema_queried": False,
        "schema_before_use": False,
        "errors_then_fixed": 1,
        "recovered": True,
    }


@pytest.mark.parametrize(
    ("actions", "reward"),
    [
        # Order-insensitive: the gold has no ORDER BY, the prediction sorts descending.
        (
            [f"{THINK}<solution>SELECT genre, COUNT(*) FROM books GROUP BY genre ORDER BY 1 DESC</solution>"],
            1.0,
        ),
        # Duplicated rows still match under the published set rule.
        (
            [
                f"{THINK}<solution>SELECT genre, COUNT(*) FROM books GROUP BY genre UNION ALL SELECT genre, COUNT(*) FROM books GROUP BY genre</solution>"
            ],
            1.0,
        ),
        # Column order matters; a wrong answer is 0.
        ([f"{THINK}<solution>SELECT COUNT(*), genre FROM books GROUP BY genre</solution>"], 0.0),
        ([f"{THINK}<solution>SELECT genre FROM books GROUP BY genre</solution>"], 0.0),
        # A solution that fails to run is wrong, not malformed.
        ([f"{THINK}<solution>SELECT * FROM nowhere</solution>"], 0.0),
        ([f"{THINK}<solution>DELETE FROM books</solution>"], 0.0),
        # A code fence around the solution is accepted.
        ([f"{THINK}<solution>```sql\nSELECT genre, COUNT(*) FROM books GROUP BY genre\n```</solution>"], 1.0),
        # Malformed: no think, two solutions, tags inside the solution, no think after an observation.
        (["<solution>SELECT genre, COUNT(*) FROM books GROUP BY genre</solution>"], -1.0),
        ([f"{THINK}<solution>SELECT 1</solution><solution>SELECT 2</solution>"], -1.0),
        ([f"{THINK}<solution><sql>SELECT 1</sql></solution>"], -1.0),
        (
            [
                f"{THINK}<sql>SELECT 1</sql>",
                "<solution>SELECT genre, COUNT(*) FROM books GROUP BY genre</solution>",
            ],
            -1.0,
        ),
        (
            [
                f"{THINK}<sql>SELECT 1</sql>",
                f" \n{THINK}<solution>SELECT genre, COUNT(*) FROM books GROUP BY genre</solution>",
            ],
            1.0,
        ),
    ],
)
def test_reward_rule(rows, actions, reward):
    outs, _ = _episode(_row(rows, "library-05"), actions)
    assert outs[-1].done and outs[-1].reward == reward, outs[-1].metadata


def test_turn_limit_without_solution_is_malformed_and_truncated(rows):
    row = _row(rows, "retail-00")
    outs, env = _episode(row, [f"{THINK}<sql>SELECT 1</sql>"] * 3, {"max_turns": 3})
    assert [o.done for o in outs] == [False, False, True]
    assert "1 turn left" in outs[1].observations[0]["content"]
    last = outs[-1]
    assert (last.reward, last.truncated, last.metadata["reward_kind"]) == (-1.0, True, "malformed")
    assert env.get_metrics()["truncated"] is True
    # max_turns from the row wins over env_config, as in the published env.
    _, env = _episode({**row, "max_turns": 2}, [], {"max_turns": 3})
    assert env.max_turns == 2


def test_multiset_rule_counts_duplicates(rows):
    dup = f"{THINK}<solution>SELECT COUNT(*) FROM books UNION ALL SELECT COUNT(*) FROM books</solution>"
    assert _episode(_row(rows, "library-00"), [dup])[0][-1].reward == 1.0
    assert _episode(_row(rows, "library-00"), [dup], {"row_match": "multiset"})[0][-1].reward == 0.0


def test_failing_gold_sql_is_a_recorded_grading_error(rows):
    row = {**_row(rows, "library-00"), "reward_spec": {"ground_truth": "SELECT * FROM missing_table"}}
    outs, env = _episode(row, [f"{THINK}<solution>SELECT 1</solution>"])
    assert outs[-1].reward == 0.0 and outs[-1].metadata["error"] == "grading_error"
    assert "missing_table" in outs[-1].metadata["grading_error"]
    assert env.get_metrics()["grading_error"] is True


def test_refused_and_no_sql_turns_are_observations(rows):
    outs, env = _episode(
        _row(rows, "library-00"),
        [f"{THINK}<sql>DROP TABLE books</sql>", "just text", f"{THINK}<sql>SELECT COUNT(*) FROM books</sql>"],
    )
    assert outs[0].observations[0]["content"].startswith("\n\n<observation>Refused: DROP")
    assert outs[1].metadata["error"] == "no_sql"
    assert outs[1].metadata["tool_input"] == ("library", None, 3)
    assert outs[1].observations[0]["content"] == (
        f"\n\n<observation>{INVALID_ACTION_HINT}\n"
        "<reminder>You have 3 turns left to complete the task.</reminder></observation>\n\n"
    )
    assert "150" in outs[2].observations[0]["content"]
    metrics = env.get_metrics()
    assert (metrics["sql_refused"], metrics["no_sql_turns"], metrics["sql_calls"]) == (1, 1, 2)


def test_bad_rows_and_missing_databases_raise_config_errors(rows, tmp_path):
    row = _row(rows, "library-00")
    with pytest.raises(ConfigError, match="ground_truth"):
        skyrl_gym.make("text2sql", extras={**row, "reward_spec": {}})
    with pytest.raises(ConfigError, match="extras\\['data'\\]"):
        skyrl_gym.make("text2sql", extras={**row, "data": "sqlzoo"})
    with pytest.raises(ConfigError, match="db_id"):
        skyrl_gym.make("text2sql", extras={**row, "db_id": "../etc"})
    with pytest.raises(ConfigError) as info:
        skyrl_gym.make("text2sql", env_config={"db_path": str(tmp_path)}, extras={**row, "data": "spider"})
    message = str(info.value)
    assert str(tmp_path / "spider/database/library/library.sqlite") in message and "db_path" in message
    with pytest.raises(ConfigError, match="max_turns"):
        skyrl_gym.make("text2sql", env_config={"max_turns": 0}, extras=row)


@pytest.mark.parametrize(
    ("data", "layout"),
    [
        ("spider", "spider/database"),
        ("synsql", "SynSQL-2.5M/databases"),
        ("bird", "bird/train/train_databases"),
    ],
)
def test_published_layouts_with_omegaconf_config(rows, tmp_path, data, layout):
    row = _row(rows, "flights-05")
    target = tmp_path / layout / "flights" / "flights.sqlite"
    target.parent.mkdir(parents=True)
    shutil.copy(bundled_db_dir() / "flights" / "flights.sqlite", target)
    target.chmod(0o644)
    cfg = OmegaConf.create({"db_path": str(tmp_path)})
    gold = row["reward_spec"]["ground_truth"]
    outs, env = _episode({**row, "data": data}, [f"{THINK}<solution>{gold}</solution>"], cfg)
    assert env.db_file == target and outs[-1].reward == 1.0


def test_every_bundled_gold_sql_scores_one(rows):
    assert len(rows) >= 60
    assert {r["db_id"] for r in rows} >= {"library", "retail", "university", "flights"}
    assert {r["extra_info"]["difficulty"] for r in rows} == {"easy", "medium", "hard"}
    train, evaluation = load_bundled_rows("train"), load_bundled_rows("eval")
    assert len(train) + len(evaluation) == len(rows) and len(evaluation) >= 12
    assert not {r["extra_info"]["id"] for r in train} & {r["extra_info"]["id"] for r in evaluation}
    for row in rows:
        gold = row["reward_spec"]["ground_truth"]
        db_file = bundled_db_dir() / row["db_id"] / f"{row['db_id']}.sqlite"
        result = execute(db_file, gold, max_rows=100_000)
        assert result.ok and result.rows, (row["extra_info"]["id"], result)
        assert row["env_class"] == "text2sql" and row["prompt"][0]["role"] == "system"
        assert (
            "CREATE TABLE" in row["prompt"][1]["content"]
            and row["extra_info"]["question"] in row["prompt"][1]["content"]
        )
        outs, _ = _episode(row, [f"{THINK}<sql>{gold}</sql>", f"{THINK}<solution>{gold}</solution>"])
        assert outs[-1].reward == 1.0, row["extra_info"]["id"]


def test_bundled_data_is_reproducible_from_the_generator():
    from skyrl_gym.envs.sql import _make_data

    for db_id, build in _make_data.DATABASES.items():
        assert (_make_data.DATA_DIR / f"{db_id}.sql").read_text() == build()
    assert [(q["db_id"], q["question"], q["sql"]) for q in bundled_questions()] == [
        (q[0], q[2], q[3]) for q in _make_data.QUESTIONS
    ]


@pytest.mark.slow
def test_concurrent_first_build_is_safe(tmp_path, monkeypatch):
    monkeypatch.setenv("SKYRL_CACHE_DIR", str(tmp_path / "cache"))
    with ThreadPoolExecutor(max_workers=8) as pool:
        dirs = list(pool.map(lambda _: bundled_db_dir(), range(8)))
    assert len(set(dirs)) == 1
    # Two more processes racing on a fresh cache.
    fresh = tmp_path / "cache2"
    script = (
        "from skyrl_gym.envs.sql import bundled_db_dir, execute;"
        "d = bundled_db_dir();"
        "print(execute(d / 'retail' / 'retail.sqlite', 'SELECT COUNT(*) FROM orders').rows)"
    )
    env = {**__import__("os").environ, "SKYRL_CACHE_DIR": str(fresh)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert outs == ["((1200,),)"] * 3
    leftovers = [p for p in fresh.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_256_concurrent_episodes_match_serial_runs(rows, tmp_path):
    # A non-immutable copy (spider layout), so SQLite's file locking is really exercised.
    target = tmp_path / "spider/database/university/university.sqlite"
    target.parent.mkdir(parents=True)
    shutil.copy(bundled_db_dir() / "university" / "university.sqlite", target)
    uni = [dict(r, data="spider") for r in rows if r["db_id"] == "university"]
    cfg = {"db_path": str(tmp_path)}

    def episode(i: int) -> tuple:
        row = uni[i % len(uni)]
        gold = row["reward_spec"]["ground_truth"]
        actions = [
            f"{THINK}<sql>SELECT COUNT(*) FROM enrollments WHERE grade > {i % 4}</sql>",
            f"{THINK}<sql>{gold}</sql>",
            f"{THINK}<sql>SELECT s.name, COUNT(*) FROM students s JOIN enrollments e USING (student_id) GROUP BY s.student_id ORDER BY 2 DESC, 1 LIMIT 5</sql>",
            f"{THINK}<solution>{gold if i % 3 else 'SELECT 1'}</solution>",
        ]
        outs, env = _episode(row, actions, cfg)
        env.close()
        return tuple((repr(o.observations), o.reward, o.done) for o in outs)

    serial = [episode(i) for i in range(256)]
    barrier = threading.Barrier(256)

    def concurrent(i: int) -> tuple:
        barrier.wait(timeout=60)
        return episode(i)

    with ThreadPoolExecutor(max_workers=256) as pool:
        results = list(pool.map(concurrent, range(256)))
    assert not any("locked" in repr(r) for r in results)
    for i, result in enumerate(results):
        assert result == serial[i], i


def test_gymnasium_bridge():
    env = gymnasium.make("skyrl/text2sql")
    obs, info = env.reset(seed=0)
    assert info["messages"][1]["role"] == "user"
    obs, reward, terminated, truncated, _ = env.step(f"{THINK}<sql>SELECT 1 AS one</sql>")
    assert "<observation>one\n1\n" in obs and (reward, terminated, truncated) == (0.0, False, False)
    env.close()


def test_check_format_unit():
    assert check_format(f"{THINK}<solution>SELECT 1</solution>") == (True, "")
    ok, why = check_format(
        "<think>a</think>\n\n<observation>x</observation>\n\nno think <solution>1</solution>"
    )
    assert not ok and "observation" in why


def test_grading_has_its_own_deadline(rows):
    row = _row(rows, "library-00")
    runaway = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
    cfg = {"limits": {"grade_timeout_s": 0.4, "explore_timeout_s": 0.2}}
    outs, _ = _episode(row, [f"{THINK}<sql>{runaway}</sql>", f"{THINK}<solution>{runaway}</solution>"], cfg)
    assert "Timeout: the query was stopped after its 0.2 s time limit" in outs[0].observations[0]["content"]
    assert outs[1].reward == 0.0 and outs[1].metadata["solution_status"] == "timeout"


# --------------------------------------------------------------------------- parity with the published env
def _shop_db(tmp_path: Path) -> Path:
    """A fresh SQLite file in the published spider layout (``<db_path>/spider/database/<id>/<id>.sqlite``)."""
    import sqlite3

    db_file = tmp_path / "spider" / "database" / "shop" / "shop.sqlite"
    db_file.parent.mkdir(parents=True)
    with sqlite3.connect(db_file) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
        conn.executemany(
            "INSERT INTO items (name, price) VALUES (?, ?)", [("pen", 1.5), ("ink", 4.0), ("pad", 2.25)]
        )
    conn.close()
    return db_file


SHOP_GOLD = "SELECT name FROM items WHERE price > 2"


def _shop_episode(tmp_path: Path, actions: list[str]) -> tuple[list, Text2SQLEnv]:
    _shop_db(tmp_path)
    row = {
        "data": "spider",
        "db_id": "shop",
        "reward_spec": {"method": "rule", "ground_truth": SHOP_GOLD},
        "prompt": [{"role": "user", "content": "Which items cost more than 2?"}],
    }
    return _episode(row, actions, {"db_path": str(tmp_path)})


def test_a_turn_without_sql_then_the_right_solution_scores_one(tmp_path):
    """The recoverable episode: the hint for the empty turn is not read as the model's text."""
    outs, env = _shop_episode(
        tmp_path,
        [
            "<think>I know the table already.</think> The items are in the items table.",
            "<think>Now the answer.</think><solution>SELECT name FROM items WHERE price > 2.0</solution>",
        ],
    )
    hint, last = outs
    assert hint.observations[0]["content"] == (
        "\n\n<observation>Your previous action is invalid. Follow the format of outputting thinking "
        "process and sql tool, and try again.\n<reminder>You have 4 turns left to complete the task."
        "</reminder></observation>\n\n"
    )
    assert hint.metadata == {
        "tool_group": "SQLCodeExecutorToolGroup",
        "tool_name": "sql",
        "tool_input": ("shop", None, 4),
        "error": "no_sql",
        "schema_queried": False,
        "uses_table": False,
    }
    assert (last.done, last.reward, last.metadata["reward_kind"]) == (True, 1.0, "correct")
    assert env.get_metrics()["no_sql_turns"] == 1 and env.get_metrics()["format_ok"] is True


def test_observation_text_never_decides_the_format(tmp_path):
    """Observations that show tags (a row holding '<solution>') are not the model's text."""
    import sqlite3

    _shop_db(tmp_path)
    db_file = tmp_path / "spider" / "database" / "shop" / "shop.sqlite"
    with sqlite3.connect(db_file) as conn:
        conn.execute("INSERT INTO items (name, price) VALUES ('<solution>SELECT 1</solution>', 0)")
    conn.close()
    row = {"data": "spider", "db_id": "shop", "reward_spec": {"ground_truth": SHOP_GOLD}, "prompt": []}
    outs, _ = _episode(
        row,
        [
            "<think>Look at the names.</think><sql>SELECT name FROM items</sql>",
            f"<think>Done.</think><solution>{SHOP_GOLD}</solution>",
        ],
        {"db_path": str(tmp_path)},
    )
    assert "&lt;" not in outs[0].observations[0]["content"]  # the row is shown as it is
    assert "<solution>SELECT 1</solution>" in outs[0].observations[0]["content"]
    assert outs[-1].reward == 1.0, outs[-1].metadata


@pytest.mark.parametrize(
    ("turns", "ok", "why"),
    [
        ([f"{THINK}<solution>SELECT 1</solution>"], True, ""),
        ([f"{THINK} no query", f"  {THINK}<solution>SELECT 1</solution>"], True, ""),
        # case-insensitive, as published: a turn may open with <THINK>
        (
            [f"{THINK}<sql>SELECT 1</sql>", "<THINK>x</THINK><think>y</think><solution>SELECT 1</solution>"],
            True,
            "",
        ),
        ([f"{THINK}<sql>SELECT 1</sql>", "<solution>SELECT 1</solution>"], False, "turn 2"),
        ([f"{THINK}<sql>SELECT 1</sql>", f"x {THINK}<solution>SELECT 1</solution>"], False, "turn 2"),
        (["<think>a", "</think><solution>SELECT 1</solution>"], False, "turn 2"),
        ([f"{THINK}<solution>SELECT 1", f"{THINK}</solution>"], False, "later turn"),
        ([f"{THINK}</solution><solution>SELECT 1"], False, "comes before"),
        (
            [f"{THINK}<solution>SELECT 1</solution>", f"{THINK}<solution>SELECT 2</solution>"],
            False,
            "2 opening",
        ),
        ([f"{THINK}<solution><SQL>SELECT 1</solution>"], False, "'<SQL'"),
        ([f"{THINK}<solution>SELECT 1 </Observation></solution>"], False, "'</Observation'"),
        (["<solution>SELECT 1</solution>"], False, "no <think>"),
        # an </observation> the model writes itself must be followed by <think> in that turn
        (
            [f"{THINK}<observation>made up</observation>", f"{THINK}<solution>SELECT 1</solution>"],
            False,
            "turn 1",
        ),
        ([f"{THINK}</observation> <think>b</think><solution>SELECT 1</solution>"], True, ""),
        ([f"{THINK}</observation><solution>SELECT 1</solution>"], False, "turn 1"),
        ([f"{THINK}<sql>1</sql>", f"{THINK}<sql>2</sql>"], False, "found 0 opening"),
    ],
)
def test_check_format_reads_the_model_turns(turns, ok, why):
    got_ok, got_why = check_format(turns)
    assert got_ok is ok and why in got_why, got_why


def test_grade_takes_the_model_turns(tmp_path):
    db_file = _shop_db(tmp_path)
    turns = ["<think>no query</think>", f"<think>ok</think><solution>{SHOP_GOLD}</solution>"]
    assert grade(turns, SHOP_GOLD, db_file).reward == 1.0
    assert grade(turns[1], SHOP_GOLD, db_file).reward == 1.0  # one string is one turn
    assert grade(["<think>x</think><sql>1</sql>"], SHOP_GOLD, db_file).reward == -1.0
