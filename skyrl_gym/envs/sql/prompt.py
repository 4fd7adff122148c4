"""Prompts and dataset rows for text2sql.

A row is in the published format: ``prompt`` (chat messages), ``env_class`` (``text2sql``),
``data_source``, ``data`` (which layout the database lives in), ``db_id`` and
``reward_spec = {"method": "rule", "ground_truth": <gold SQL>}``, plus ``extra_info``.

The user message shows the schema as a block, ``Database schema:`` followed by the ``CREATE``
statements. With ``hide_schema`` the block is :func:`hidden_schema_block` instead: the database's
name and one sentence saying that the schema is not shown and how to explore it with SQL; such
rows also carry ``env_config = {"hide_schema": True}``. :func:`hide_schema_in_prompt` turns a
prompt of the first kind into one of the second (the env calls it when ``hide_schema`` is on).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from skyrl_gym.envs.sql._bundled import bundled_db_dir, bundled_questions
from skyrl_gym.types import ConversationType

__all__ = [
    "SYSTEM_PROMPT",
    "HIDDEN_SCHEMA_NOTE",
    "build_prompt",
    "database_schema",
    "format_schema",
    "hidden_schema_block",
    "hide_schema_in_prompt",
    "make_row",
    "load_bundled_rows",
]

SYSTEM_PROMPT = """\
You are a data analyst. You answer a question about a SQLite database by writing one SQL query.

You work in turns. Begin every turn by reasoning inside <think>...</think>. Then do one of:
- explore: write one SQLite query inside <sql>...</sql>. Its result comes back inside
  <observation>...</observation> (at most {max_rows} rows), with the number of turns you have left;
- answer: write your final SQLite query inside <solution>...</solution>. This ends the task.

Rules:
- The database is read-only: only SELECT (and WITH) queries run.
- You have {max_turns} turns in all. Answer with <solution> before they run out.
- Your solution is executed and its rows are compared with the rows of the reference query;
  row order does not matter. Return exactly the columns the question asks for.
- Put only the query inside <solution>...</solution>, nothing else."""

USER_TEMPLATE = """\
Database engine: SQLite

{schema_block}

Question: {question}

Explore the database with <sql> queries if you need to, then give your answer in <solution>...</solution>."""

#: What opens the schema block of a prompt that shows the schema.
SCHEMA_HEADER = "Database schema:\n"
#: The sentence that stands for the schema when it is hidden (after a line naming the database).
HIDDEN_SCHEMA_NOTE = (
    "The schema is not shown; explore it with SQL: SELECT name FROM sqlite_master WHERE type = "
    "'table' lists the tables and PRAGMA table_info(<table>) lists the columns of a table."
)


def format_schema(statements: Sequence[str]) -> str:
    """``CREATE`` statements as a prompt shows them: each ending in ``;``, a blank line between."""
    return "\n\n".join(stmt.strip().rstrip(";") + ";" for stmt in statements)


def database_schema(db_file: str | Path) -> str:
    """The ``CREATE`` statements of the tables and views in ``db_file``, one after another."""
    from skyrl_gym.envs.sql.executor import ReadOnlyDatabase

    with ReadOnlyDatabase(db_file) as db:
        return format_schema(db.schema())


def hidden_schema_block(db_id: str) -> str:
    """What stands for the schema block when the schema is hidden: the database's name and
    :data:`HIDDEN_SCHEMA_NOTE`."""
    return f"Database: {db_id}\n{HIDDEN_SCHEMA_NOTE}"


def hide_schema_in_prompt(
    messages: Sequence[Mapping[str, Any]], statements: Sequence[str], db_id: str
) -> ConversationType:
    """``messages`` with the schema of database ``db_id`` (its ``CREATE`` ``statements``) hidden.

    Every ``Database schema:`` block that shows the statements (as :func:`format_schema` writes
    them) becomes :func:`hidden_schema_block`; when no message has that block afterwards (a row
    without a schema block), it opens the last user message. Raises
    :class:`~skyrl_gym.errors.ConfigError` when a ``CREATE`` statement of the database still
    shows (a prompt that writes the schema another way): such rows must be written hidden, with
    ``build_prompt(..., hide_schema=True)``."""
    from skyrl_gym.errors import ConfigError

    block = hidden_schema_block(db_id)
    shown = SCHEMA_HEADER + format_schema(statements)
    out = [
        {**m, "content": m["content"].replace(shown, block)} if isinstance(m.get("content"), str) else dict(m)
        for m in messages
    ]
    texts = [m["content"] for m in out if isinstance(m.get("content"), str)]
    if not any(block in text for text in texts):
        last = next((i for i in range(len(out) - 1, -1, -1) if out[i].get("role") == "user"), None)
        if last is None or not isinstance(out[last].get("content"), str):
            out.append({"role": "user", "content": block})
        else:
            out[last]["content"] = f"{block}\n\n{out[last]['content']}"
    for statement in (s.strip().rstrip(";").strip() for s in statements):
        if statement and any(statement in text for text in texts):
            raise ConfigError(
                f"hide_schema is on but the prompt of database {db_id!r} still shows its schema "
                f"({statement.splitlines()[0][:60]!r}...) in a form the env cannot remove; write the "
                "rows with hidden schemas (skyrl_gym.envs.sql.build_prompt(..., hide_schema=True, "
                "db_id=...) or examples/skyrl_sql/hidden_data.py) or turn hide_schema off"
            )
    return out


def build_prompt(
    question: str,
    schema: str | None,
    *,
    max_turns: int = 5,
    max_rows: int = 50,
    evidence: str | None = None,
    hide_schema: bool = False,
    db_id: str | None = None,
) -> ConversationType:
    """The prompt messages for one question: a system message with the rules and a user
    message with the schema and the question (and optional ``evidence``, as BIRD has).

    ``hide_schema``: the user message names the database ``db_id`` instead of showing
    ``schema`` (which may then be None)."""
    if hide_schema:
        if not db_id:
            from skyrl_gym.errors import ConfigError

            raise ConfigError("build_prompt(hide_schema=True) needs db_id, the database the prompt names")
        schema_block = hidden_schema_block(db_id)
    else:
        if schema is None:
            raise TypeError("build_prompt needs the schema text unless hide_schema=True")
        schema_block = SCHEMA_HEADER + schema
    user = USER_TEMPLATE.format(schema_block=schema_block, question=question.strip())
    if evidence:
        user = user.replace("\n\nExplore", f"\nHint: {evidence.strip()}\n\nExplore", 1)
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(max_turns=max_turns, max_rows=max_rows)},
        {"role": "user", "content": user},
    ]


def make_row(
    question: str,
    gold_sql: str,
    db_id: str,
    db_file: str | Path,
    *,
    data: Literal["bundled", "synsql", "spider", "bird"] = "bundled",
    data_source: str = "skyrl-sql-bundled",
    max_turns: int = 5,
    extra_info: Mapping[str, Any] | None = None,
    hide_schema: bool = False,
) -> dict[str, Any]:
    """One dataset row in the published format for a question on ``db_file``; ``hide_schema``
    writes the hidden-schema prompt and sets the row's ``env_config`` ``hide_schema``."""
    schema = None if hide_schema else database_schema(db_file)
    row = {
        "data_source": data_source,
        "prompt": build_prompt(question, schema, max_turns=max_turns, hide_schema=hide_schema, db_id=db_id),
        "env_class": "text2sql",
        "data": data,
        "db_id": db_id,
        "reward_spec": {"method": "rule", "ground_truth": gold_sql},
        "extra_info": dict(extra_info or {}),
    }
    if hide_schema:
        row["env_config"] = {"hide_schema": True}
    return row


def load_bundled_rows(
    split: Literal["train", "eval", "all"] = "train", *, max_turns: int = 5, hide_schema: bool = False
) -> list[dict[str, Any]]:
    """The bundled questions as dataset rows (``split``: ``train``, ``eval`` or ``all``);
    ``hide_schema`` writes hidden-schema rows (see :func:`make_row`).

    Each row's ``extra_info`` holds the question ``id``, ``difficulty``, ``split`` and text."""
    db_dir = bundled_db_dir()
    schemas: dict[str, str] = {}
    rows = []
    for q in bundled_questions(split):
        db_id = q["db_id"]
        db_file = db_dir / db_id / f"{db_id}.sqlite"
        if db_id not in schemas and not hide_schema:
            schemas[db_id] = database_schema(db_file)
        row = {
            "data_source": "skyrl-sql-bundled",
            "prompt": build_prompt(
                q["question"], schemas.get(db_id), max_turns=max_turns, hide_schema=hide_schema, db_id=db_id
            ),
            "env_class": "text2sql",
            "data": "bundled",
            "db_id": db_id,
            "reward_spec": {"method": "rule", "ground_truth": q["sql"]},
            "extra_info": {k: q[k] for k in ("id", "difficulty", "split", "question")},
        }
        if hide_schema:
            row["env_config"] = {"hide_schema": True}
        rows.append(row)
    return rows
