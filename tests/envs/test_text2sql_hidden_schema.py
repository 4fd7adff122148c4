"""text2sql with a hidden schema (``env_config`` ``hide_schema``), on real SQLite files: the prompt
names the database and not its tables or columns, exploration queries run and writes do not,
the exploration metadata and metrics on hand-played episodes, and the generated data set of
``examples/skyrl_sql/hidden_data.py`` (disjoint splits, names not guessable from the question,
a worked example whose observations are the env's)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sqlite3
import sys
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.envs.sql import HIDDEN_SCHEMA_NOTE, hidden_schema_block, load_bundled_rows
from skyrl_gym.envs.sql._queries import identifiers, names_table, reads_schema
from skyrl_gym.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
THINK = "<think>Next step.</think>"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


hidden_data = _load("hidden_data", REPO / "examples" / "skyrl_sql" / "hidden_data.py")
cpu_data = sys.modules["cpu_data"]


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> tuple[Path, dict[str, list[dict]]]:
    root = tmp_path_factory.mktemp("hidden")
    files = hidden_data.write_task(root, seed=3)
    return root, {
        split: [json.loads(x) for x in open(f)] for split, f in zip(("train", "eval"), files, strict=True)
    }


def _db_file(root: Path, db_id: str) -> Path:
    return root / "spider" / "database" / db_id / f"{db_id}.sqlite"


def _names(db_file: Path) -> dict[str, list[str]]:
    """Table -> column names of a SQLite file, read directly (not through the env)."""
    conn = sqlite3.connect(db_file)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in tables}
    finally:
        conn.close()


def _play(root: Path | None, row: dict, actions: list[str], env_config: dict | None = None):
    config = {**row.get("env_config", {}), **(env_config or {})}
    if root is not None:
        config["db_path"] = str(root)
    env = skyrl_gym.make("text2sql", env_config=config, extras=row)
    messages, info = env.init(row["prompt"])
    outs = []
    for action in actions:
        outs.append(env.step(action))
        if outs[-1].done:
            break
    return messages, outs, env


def _text(messages: list[dict]) -> str:
    return "\n".join(str(m["content"]) for m in messages)


# ------------------------------------------------------------------------------------ the prompt
def test_a_hidden_row_names_its_database_and_no_table_or_column(task):
    root, rows = task
    for row in rows["train"] + rows["eval"]:
        assert row["env_config"] == {"hide_schema": True}
        messages, _, env = _play(root, row, [])
        assert messages == row["prompt"]  # written hidden: the env has nothing to rewrite
        text = _text(messages)
        assert hidden_schema_block(row["db_id"]) in messages[-1]["content"]
        for table, columns in _names(_db_file(root, row["db_id"])).items():
            for name in (table, *columns):
                assert not re.search(rf"\b{name}\b", text, re.IGNORECASE), (row["id"], name)
        env.close()


def test_the_env_hides_the_schema_of_a_row_that_shows_it():
    row = load_bundled_rows("train")[0]
    shown, _, env = _play(None, row, [])
    assert "Database schema:\nCREATE TABLE" in shown[-1]["content"]  # normal mode: the schema is there
    hidden, _, env = _play(None, row, [], {"hide_schema": True})
    assert "CREATE" not in _text(hidden)
    assert hidden_schema_block(row["db_id"]) in hidden[-1]["content"]
    assert HIDDEN_SCHEMA_NOTE.startswith("The schema is not shown")
    assert hidden[-1]["content"].split("Question:")[1] == shown[-1]["content"].split("Question:")[1]
    assert env.chat_history == hidden
    # the same rows written hidden give the same prompt
    written = load_bundled_rows("train", hide_schema=True)[0]
    assert written["prompt"] == hidden and written["env_config"] == {"hide_schema": True}


def test_a_cpu_data_row_turned_hidden_by_the_env_reads_like_a_hidden_row(tmp_path):
    train_file, _ = cpu_data.write_task(tmp_path, max_turns=3)
    row = json.loads(open(train_file).readline())
    messages, _, _ = _play(tmp_path, row, [], {"hide_schema": True})
    question = row["extra_info"]["question"]
    assert messages[-1]["content"] == f"{hidden_schema_block(row['db_id'])}\n\nQuestion: {question}"
    assert messages[:-1] == row["prompt"][:-1]  # the example turns on `items` are another database


def test_a_prompt_that_shows_the_schema_another_way_is_a_config_error():
    row = load_bundled_rows("train")[0]
    prompt = [dict(m) for m in row["prompt"]]
    prompt[-1]["content"] = prompt[-1]["content"].replace("Database schema:\n", "Tables:\n")
    env = skyrl_gym.make("text2sql", env_config={"hide_schema": True}, extras=row)
    with pytest.raises(ConfigError, match="still shows its schema.*hide_schema=True"):
        env.init(prompt)


def test_a_prompt_without_a_schema_block_gets_the_note():
    row = load_bundled_rows("train")[0]
    env = skyrl_gym.make("text2sql", env_config={"hide_schema": True}, extras=row)
    messages, info = env.init([{"role": "user", "content": "Question: how many books?"}])
    assert messages[-1]["content"] == f"{hidden_schema_block(row['db_id'])}\n\nQuestion: how many books?"
    assert info["hide_schema"] is True


# ------------------------------------------------------------------------------ the executor
def test_exploration_queries_run_and_show_the_table_and_columns(task):
    root, rows = task
    row = rows["eval"][0]
    ((table, columns),) = _names(_db_file(root, row["db_id"])).items()
    _, outs, _ = _play(
        root,
        row,
        [
            f"{THINK}<sql>SELECT name FROM sqlite_master WHERE type = 'table'</sql>",
            f"{THINK}<sql>PRAGMA table_info({table})</sql>",
            f"{THINK}<sql>SELECT name, type FROM pragma_table_info('{table}')</sql>",
            f"{THINK}<sql>SELECT sql FROM sqlite_schema</sql>",
        ],
    )
    texts = [o.observations[0]["content"] for o in outs]
    assert texts[0].startswith(f"\n\n<observation>name\n{table}\n<reminder>")
    for text in texts[1:]:
        assert all(c in text for c in columns) and "Error" not in text and "Refused" not in text
    assert [o.metadata["status"] for o in outs] == ["ok"] * 4
    assert [o.metadata["schema_queried"] for o in outs] == [True] * 4


def test_writes_are_still_refused(task):
    root, rows = task
    row = rows["train"][0]
    db_file = _db_file(root, row["db_id"])
    before = hashlib.sha256(db_file.read_bytes()).hexdigest()
    ((table, columns),) = _names(db_file).items()
    writes = [
        f"DROP TABLE {table}",
        f"DELETE FROM {table}",
        f"UPDATE {table} SET {columns[0]} = 'x'",
        f"INSERT INTO {table} VALUES ('a', 'b', 1)",
        "UPDATE sqlite_master SET name = 'x'",
        "PRAGMA writable_schema = ON",
        "PRAGMA user_version = 7",
        f"WITH x AS (SELECT 1) DELETE FROM {table}",
    ]
    row = {**row, "max_turns": len(writes) + 1}
    _, outs, env = _play(root, row, [f"{THINK}<sql>{w}</sql>" for w in writes])
    assert [o.metadata["status"] for o in outs] == ["refused"] * len(writes)
    assert all("Refused:" in o.observations[0]["content"] for o in outs)
    assert env.get_metrics()["sql_refused"] == len(writes)
    assert hashlib.sha256(db_file.read_bytes()).hexdigest() == before


# ----------------------------------------------------------------------- metadata and metrics
def _first(rows: list[dict], shape: str) -> dict:
    return next(r for r in rows if r["extra_info"]["shape"] == shape)


def test_explore_then_answer(task):
    root, rows = task
    row = _first(rows["eval"], "lookup")
    ((table, _),) = _names(_db_file(root, row["db_id"])).items()
    gold = row["reward_spec"]["ground_truth"]
    _, outs, env = _play(
        root,
        row,
        [
            f"{THINK}<sql>SELECT name FROM sqlite_master WHERE type = 'table'</sql>",
            f"{THINK}<sql>PRAGMA table_info({table})</sql>",
            f"{THINK}<sql>{gold}</sql>",
            f"{THINK}<solution>{gold}</solution>",
        ],
    )
    assert [o.metadata["schema_queried"] for o in outs] == [True, True, False, False]
    assert [o.metadata["uses_table"] for o in outs] == [False, False, True, True]
    assert outs[-1].reward == 1.0
    metrics = env.get_metrics()
    assert {k: metrics[k] for k in ("exploration_queries", "schema_queried", "schema_before_use")} == {
        "exploration_queries": 2,
        "schema_queried": True,
        "schema_before_use": True,
    }
    assert (metrics["recovered"], metrics["errors_then_fixed"], metrics["solved"]) == (False, 0, True)


def test_answer_without_exploring(task):
    root, rows = task
    row = _first(rows["train"], "count")
    _, outs, env = _play(root, row, [f"{THINK}<solution>{row['reward_spec']['ground_truth']}</solution>"])
    assert outs[0].reward == 1.0 and outs[0].metadata["uses_table"] is True
    assert outs[0].metadata["schema_queried"] is False
    metrics = env.get_metrics()
    assert (metrics["exploration_queries"], metrics["schema_queried"], metrics["schema_before_use"]) == (
        0,
        False,
        False,
    )
    assert (metrics["recovered"], metrics["errors_then_fixed"], metrics["turns"]) == (False, 0, 1)


def test_error_then_recovery(task):
    root, rows = task
    row = _first(rows["train"], "max")
    noun = row["extra_info"]["domain"]
    word = next(h.words.amount for h in hidden_data.TRAIN if h.words.table == noun)
    gold = row["reward_spec"]["ground_truth"]
    # guessed from the question's words: the table does not exist, so it is no use of a table
    _, outs, env = _play(
        root,
        row,
        [
            f"{THINK}<sql>SELECT MAX({word}) FROM {noun}</sql>",
            f"{THINK}<sql>SELECT * FROM {noun}</sql>",
            f"{THINK}<sql>SELECT sql FROM sqlite_master</sql>",
            f"{THINK}<solution>{gold}</solution>",
        ],
    )
    assert "Error: no such table" in outs[0].observations[0]["content"]
    assert [o.metadata.get("error") for o in outs[:3]] == ["error", "error", None]
    assert [o.metadata["uses_table"] for o in outs] == [False, False, False, True]
    assert outs[-1].reward == 1.0
    metrics = env.get_metrics()
    assert (metrics["errors_then_fixed"], metrics["recovered"], metrics["sql_errors"]) == (2, True, 2)
    assert (metrics["schema_before_use"], metrics["exploration_queries"]) == (True, 1)


def test_a_use_before_the_schema_query_and_a_failure_never_fixed(task):
    root, rows = task
    row = _first(rows["train"], "min")
    ((table, _),) = _names(_db_file(root, row["db_id"])).items()
    _, outs, env = _play(
        root,
        row,
        [
            f"{THINK}<sql>SELECT * FROM {table}</sql>",  # found the name by luck: a use, no schema yet
            f"{THINK}<sql>PRAGMA table_info({table})</sql>",
            f"{THINK}<sql>SELECT nothing FROM {table}</sql>",
            f"{THINK}<solution>SELECT MIN(nothing) FROM {table}</solution>",
        ],
    )
    assert [o.metadata["uses_table"] for o in outs] == [True, False, True, True]
    assert outs[-1].reward == 0.0 and outs[-1].metadata["solution_status"] == "error"
    metrics = env.get_metrics()
    assert (metrics["schema_before_use"], metrics["schema_queried"]) == (False, True)
    assert (metrics["errors_then_fixed"], metrics["recovered"]) == (0, False)


def test_a_malformed_solution_is_not_run_and_uses_no_table(task):
    root, rows = task
    row = _first(rows["train"], "count")
    _, outs, env = _play(
        root,
        row,
        [
            f"{THINK}<sql>SELECT nope</sql>",
            f"no think<solution>{row['reward_spec']['ground_truth']}</solution>",
        ],
    )
    assert outs[-1].reward == -1.0
    assert (outs[-1].metadata["schema_queried"], outs[-1].metadata["uses_table"]) == (False, False)
    assert (env.get_metrics()["errors_then_fixed"], env.get_metrics()["recovered"]) == (0, False)


def test_the_metrics_describe_an_episode_with_the_schema_shown():
    row = next(r for r in load_bundled_rows("train") if "books" in r["reward_spec"]["ground_truth"])
    gold = row["reward_spec"]["ground_truth"]
    _, outs, env = _play(
        None,
        row,
        [
            f"{THINK}<sql>PRAGMA table_info(books)</sql>",
            f'{THINK}<sql>SELECT * FROM "books" WHERE 1 = 2 -- sqlite_master</sql>',
            f"{THINK}<solution>{gold}</solution>",
        ],
    )
    assert [o.metadata["schema_queried"] for o in outs] == [True, False, False]
    assert [o.metadata["uses_table"] for o in outs] == [False, True, True]
    metrics = env.get_metrics()
    assert (metrics["schema_before_use"], metrics["exploration_queries"], metrics["solved"]) == (
        True,
        1,
        True,
    )


def test_identifiers_skip_strings_and_comments():
    assert identifiers("SELECT \"a b\", `c`, [d] FROM t -- sqlite_master\n/* x */ WHERE e = 'f''g'") == [
        "select",
        "a b",
        "c",
        "d",
        "from",
        "t",
        "where",
        "e",
    ]
    assert reads_schema("pragma TABLE_INFO('t')") and reads_schema("PRAGMA main.table_xinfo(t)")
    assert reads_schema("SELECT * FROM pragma_table_info('t')") and reads_schema(
        'SELECT * FROM "SQLITE_MASTER"'
    )
    assert not reads_schema("SELECT 'sqlite_master'") and not reads_schema("PRAGMA user_version")
    assert not reads_schema("SELECT table_info FROM t")
    assert names_table("select * from Pets", {"pets"}) and not names_table("select 'pets'", {"pets"})


# ------------------------------------------------------------------------------- env_config
@pytest.mark.parametrize("value", ["maybe", 2, [True], "yes", 0.5])
def test_a_malformed_hide_schema_is_a_config_error(value):
    row = load_bundled_rows("train")[0]
    with pytest.raises(ConfigError, match=r"hide_schema must be true or false.*hide_schema=true"):
        skyrl_gym.make("text2sql", env_config={"hide_schema": value}, extras=row)


@pytest.mark.parametrize(
    ("value", "hidden"), [(True, True), ("true", True), ("False", False), (0, False), (1, True)]
)
def test_hide_schema_reads_bools_as_the_cli_and_yaml_write_them(value, hidden):
    env = skyrl_gym.make("text2sql", env_config={"hide_schema": value}, extras=load_bundled_rows("train")[0])
    assert env.config.hide_schema is hidden


def test_a_misspelt_hide_schema_key_says_the_right_one():
    with pytest.raises(ConfigError, match="Did you mean 'hide_schema'"):
        skyrl_gym.make("text2sql", env_config={"hide_shema": True}, extras=load_bundled_rows("train")[0])


# ------------------------------------------------------------------------------- the data set
def _parts(names: set[str]) -> set[str]:
    return {p for n in names for p in n.lower().split("_") if p}


def test_held_out_databases_share_no_name_or_stem_with_training(task):
    root, rows = task
    names = {}
    for split in ("train", "eval"):
        found: set[str] = set()
        for db_id in {r["db_id"] for r in rows[split]}:
            for table, columns in _names(_db_file(root, db_id)).items():
                found |= {table, *columns}
        names[split] = found
    assert not {r["db_id"] for r in rows["train"]} & {r["db_id"] for r in rows["eval"]}
    assert not names["train"] & names["eval"], names["train"] & names["eval"]
    assert not _parts(names["train"]) & _parts(names["eval"]), _parts(names["train"]) & _parts(names["eval"])
    example = hidden_data.EXAMPLE_DOMAIN
    example_names = {example.table, example.key, example.kind, example.amount}
    assert not example_names & (names["train"] | names["eval"])
    assert not _parts(example_names) & _parts(names["train"] | names["eval"])


def test_names_are_not_the_question_words():
    for hidden in hidden_data.TRAIN + hidden_data.EVAL:
        words = {hidden.words.table, hidden.words.key, hidden.words.kind, hidden.words.amount}
        for part in _parts({hidden.table, hidden.key, hidden.kind, hidden.amount}):
            for word in map(str.lower, words):
                assert part not in word and word not in part and part[:4] != word[:4], (
                    hidden.table,
                    part,
                    word,
                )
        assert hidden.table != hidden.words.table


def test_wordings_shapes_and_gold_queries(task):
    from skyrl_gym.envs.sql import execute

    root, rows = task
    assert len(rows["train"]) > 150 and len(rows["eval"]) > 30
    assert {r["extra_info"]["shape"] for r in rows["train"] + rows["eval"]} == {
        "count",
        "count_where",
        "lookup",
        "max",
        "min",
    }
    for shape, train_text, _held_out_text, _ in hidden_data.SHAPES:
        pattern = re.compile("^" + re.sub(r"\\\{\w\\\}", ".+", re.escape(train_text)) + "$")
        held = [r for r in rows["eval"] if r["extra_info"]["shape"] == shape]
        assert held and not any(pattern.match(r["extra_info"]["question"]) for r in held), shape
        assert any(pattern.match(r["extra_info"]["question"]) for r in rows["train"]), shape
    for r in rows["train"] + rows["eval"]:
        assert r["max_turns"] == 5 and r["data"] == "spider"
        result = execute(_db_file(root, r["db_id"]), r["reward_spec"]["ground_truth"])
        assert result.ok and result.rows, (r["id"], result)


@pytest.mark.parametrize("style", ["inline", "messages"])
@pytest.mark.parametrize(("name", "max_turns", "schema_queries"), [("pragma", 5, 2), ("create", 3, 1)])
def test_the_worked_example_shows_what_the_env_returns(tmp_path, style, name, max_turns, schema_queries):
    hidden_data.write_example_db(tmp_path)
    example = hidden_data.worked_example(max_turns, style, name)
    actions = [action for action, _ in hidden_data.EXAMPLES[name]]
    row = {
        "db_id": hidden_data.EXAMPLE_DB_ID,
        "data": "spider",
        "reward_spec": {
            "method": "rule",
            "ground_truth": "SELECT mass_g FROM stock_rec WHERE sku_txt = 'lamp'",
        },
        "env_config": {"hide_schema": True},
        "max_turns": max_turns,
        "prompt": example[:1],
    }
    messages, outs, env = _play(tmp_path, row, actions)
    assert messages == example[:1]
    observations = [o.observations[0]["content"] for o in outs[:-1]]
    if style == "inline":
        inline = "".join(a + o for a, o in zip(actions[:-1], observations, strict=True)) + actions[-1]
        assert example[1:] == [{"role": "assistant", "content": inline}]
    else:
        played = []
        for action, observation in zip(actions, [*observations, None], strict=True):
            played.append({"role": "assistant", "content": action})
            if observation is not None:
                played.append({"role": "user", "content": observation})
        assert example[1:] == played
    assert outs[-1].reward == 1.0
    metrics = env.get_metrics()
    assert (metrics["schema_before_use"], metrics["exploration_queries"], metrics["solved"]) == (
        True,
        schema_queries,
        True,
    )
    with pytest.raises(ValueError, match=f"takes {len(actions)} turns"):
        hidden_data.worked_example(len(actions) - 1, style, name)
    with pytest.raises(ValueError, match="unknown example"):
        hidden_data.worked_example(5, style, "guess")


@pytest.mark.parametrize("style", ["inline", "messages"])
def test_every_shown_create_episode_is_what_the_env_returns_and_scores_1(tmp_path, style):
    """``--examples 3``: each worked episode, played in the env on its own database, gives the
    observations the prompt shows and a solved, well-formed episode; no example name is a
    name or a stem of either split's."""
    hidden_data.write_example_db(tmp_path)
    shown = hidden_data.worked_example(3, style, "create", examples=3)
    starts = [i for i, m in enumerate(shown) if m["role"] == "user" and m["content"].startswith("Database:")]
    assert len(starts) == 3
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(shown)
        episode = shown[start:end]
        db_id = episode[0]["content"].split("\n", 1)[0].removeprefix("Database: ")
        if style == "inline":
            text = episode[1]["content"]
            actions = [text[: text.index("</sql>") + len("</sql>")], text[text.index("<think>", 1) :]]
        else:
            actions = [m["content"] for m in episode if m["role"] == "assistant"]
        solution = actions[-1].split("<solution>")[1].split("</solution>")[0]
        row = {
            "db_id": db_id,
            "data": "spider",
            "reward_spec": {"method": "rule", "ground_truth": solution},
            "env_config": {"hide_schema": True},
            "max_turns": 3,
            "prompt": episode[:1],
        }
        _, outs, env = _play(tmp_path, row, actions)
        observation = outs[0].observations[0]["content"]
        if style == "inline":
            assert episode[1:] == [{"role": "assistant", "content": actions[0] + observation + actions[1]}]
        else:
            assert episode[2] == {"role": "user", "content": observation}
        assert outs[-1].done and outs[-1].reward == 1.0, (db_id, outs[-1])
        assert env.get_metrics()["schema_before_use"] is True
    names = {
        part
        for _db, dom, *_ in hidden_data.MORE_CREATE_EXAMPLES
        for part in _parts({dom.table, dom.key, dom.kind, dom.amount})
    }
    for hidden in hidden_data.TRAIN + hidden_data.EVAL:
        assert not names & _parts({hidden.table, hidden.key, hidden.kind, hidden.amount}), hidden.table
    with pytest.raises(ValueError, match="1 to 3 episodes"):
        hidden_data.worked_example(3, style, "create", examples=4)
    with pytest.raises(ValueError, match="1 to 1 episodes"):
        hidden_data.worked_example(5, style, "pragma", examples=2)


def test_a_task_of_some_shapes_and_more_held_out_databases(tmp_path):
    train_file, eval_file = hidden_data.write_task(
        tmp_path, max_turns=3, example="create", shapes=("count", "max"), eval_databases=3
    )
    train = [json.loads(line) for line in open(train_file)]
    held_out = [json.loads(line) for line in open(eval_file)]
    assert {r["extra_info"]["shape"] for r in train + held_out} == {"count", "max"}
    # 3 databases a held-out domain, one question of each shape on each
    assert len({r["db_id"] for r in held_out}) == 3 * len(hidden_data.EVAL) == len(held_out) / 2
    assert len({r["db_id"] for r in train}) == 3 * len(hidden_data.TRAIN)
    with pytest.raises(ValueError, match="unknown question shapes \\['median'\\]"):
        hidden_data.write_task(tmp_path / "bad", shapes=("count", "median"))
    assert not (tmp_path / "bad").exists()  # refused before any database was written
    with pytest.raises(ValueError, match="eval_databases must be at least 1"):
        hidden_data.write_task(tmp_path / "bad", eval_databases=0)
