"""Prompts and dataset rows for text2sql.

A row is in the published format: ``prompt`` (chat messages), ``env_class`` (``text2sql``),
``data_source``, ``data`` (which layout the database lives in), ``db_id`` and
``reward_spec = {"method": "rule", "ground_truth": <gold SQL>}``, plus ``extra_info``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from skyrl_gym.envs.sql._bundled import bundled_db_dir, bundled_questions
from skyrl_gym.types import ConversationType

__all__ = ["SYSTEM_PROMPT", "build_prompt", "database_schema", "make_row", "load_bundled_rows"]

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

Database schema:
{schema}

Question: {question}

Explore the database with <sql> queries if you need to, then give your answer in <solution>...</solution>."""


def database_schema(db_file: str | Path) -> str:
    """The ``CREATE`` statements of the tables and views in ``db_file``, one after another."""
    from skyrl_gym.envs.sql.executor import ReadOnlyDatabase

    with ReadOnlyDatabase(db_file) as db:
        return "\n\n".join(stmt.strip().rstrip(";") + ";" for stmt in db.schema())


def build_prompt(
    question: str, schema: str, *, max_turns: int = 5, max_rows: int = 50, evidence: str | None = None
) -> ConversationType:
    """The prompt messages for one question: a system message with the rules and a user
    message with the schema and the question (and optional ``evidence``, as BIRD has)."""
    user = USER_TEMPLATE.format(schema=schema, question=question.strip())
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
) -> dict[str, Any]:
    """One dataset row in the published format for a question on ``db_file``."""
    return {
        "data_source": data_source,
        "prompt": build_prompt(question, database_schema(db_file), max_turns=max_turns),
        "env_class": "text2sql",
        "data": data,
        "db_id": db_id,
        "reward_spec": {"method": "rule", "ground_truth": gold_sql},
        "extra_info": dict(extra_info or {}),
    }


def load_bundled_rows(
    split: Literal["train", "eval", "all"] = "train", *, max_turns: int = 5
) -> list[dict[str, Any]]:
    """The bundled questions as dataset rows (``split``: ``train``, ``eval`` or ``all``).

    Each row's ``extra_info`` holds the question ``id``, ``difficulty``, ``split`` and text."""
    db_dir = bundled_db_dir()
    schemas: dict[str, str] = {}
    rows = []
    for q in bundled_questions(split):
        db_id = q["db_id"]
        db_file = db_dir / db_id / f"{db_id}.sqlite"
        if db_id not in schemas:
            schemas[db_id] = database_schema(db_file)
        rows.append(
            {
                "data_source": "skyrl-sql-bundled",
                "prompt": build_prompt(q["question"], schemas[db_id], max_turns=max_turns),
                "env_class": "text2sql",
                "data": "bundled",
                "db_id": db_id,
                "reward_spec": {"method": "rule", "ground_truth": q["sql"]},
                "extra_info": {k: q[k] for k in ("id", "difficulty", "split", "question")},
            }
        )
    return rows
