"""``text2sql``: the multi-turn SkyRL-SQL task on a hardened read-only SQLite executor.

Each turn the model thinks in ``<think>...</think>`` and either runs one exploratory query in
``<sql>...</sql>`` (the result comes back as ``<observation>...</observation>`` with a reminder
of the turns left) or answers with ``<solution>...</solution>``. The episode ends on a solution
or at ``max_turns`` (default 5); the reward is given once, at the end (see
:mod:`skyrl_gym.envs.sql.reward` for the exact rule, which reads the model's turns only): -1
malformed, 0 wrong, 1 correct. A turn with neither ``<sql>`` nor ``<solution>`` gets the
published hint (:data:`INVALID_ACTION_HINT`) as its observation, and the episode goes on.

The metadata of an exploring turn has the published keys ``tool_group``
(``"SQLCodeExecutorToolGroup"``), ``tool_name`` (``"sql"``) and ``tool_input`` (the tuple
``(db_id, query text or None, turns left)``), plus ``status`` and ``error`` when the query did
not run. Every turn's metadata (the last one's too) also has ``schema_queried`` (the SQL the turn
sent to the database, its query or its solution, reads the schema: ``sqlite_master``,
``sqlite_schema``, ``PRAGMA table_info``/``table_xinfo``/``table_list`` or a ``pragma_table_info``
function) and ``uses_table`` (that SQL names a table or view of the database and reads no
schema); both are read from the SQL's identifiers outside strings and comments. A turn that
reaches ``max_turns`` without a solution sends nothing (its query is not run).

Hidden schema (``env_config`` ``hide_schema: true``, default false): the prompt names the
database but not its tables or columns. Rows carry their whole prompt, so the env rewrites the
row's prompt in :meth:`Text2SQLEnv.init`: a ``Database schema:`` block that shows the database's
``CREATE`` statements becomes the database's name and one sentence saying that the schema is not
shown and can be explored with ``SELECT name FROM sqlite_master`` and ``PRAGMA
table_info(<table>)`` (:func:`~skyrl_gym.envs.sql.prompt.hide_schema_in_prompt`). That covers the
bundled rows and those of ``examples/skyrl_sql/cpu_data.py``. Rows written hidden by their data
(``build_prompt(..., hide_schema=True)``, ``examples/skyrl_sql/hidden_data.py``, which also set
the row's ``env_config``) pass unchanged. A prompt that still shows a ``CREATE`` statement of the
database after the rewrite raises :class:`~skyrl_gym.errors.ConfigError`; the env does not guess
at other prompt formats (the published SynSQL prompts, say): write such rows hidden. The executor
runs these read-only exploration queries in either mode and refuses every write.

Metrics (``get_metrics()``; the same in both modes, since they describe the episode): ``turns``,
``sql_calls``, ``sql_errors``, ``sql_refused``, ``sql_timeouts``, ``no_sql_turns``, ``solved``
(reward 1), ``format_ok``, ``truncated``, ``grading_error``; and for exploration:
``exploration_queries`` (``<sql>`` queries that read the schema, whether or not they ran),
``schema_queried`` (at least one), ``schema_before_use`` (a schema query came in an earlier turn
than the first query or solution that uses a table of the database; False when none used one),
``errors_then_fixed`` (queries that failed, by an error, a refusal or a timeout, and were
followed later by a query or a graded solution that ran) and ``recovered``
(``errors_then_fixed`` > 0).

Dataset rows (``extras``) are in the published format: ``db_id``, ``data`` (``synsql``,
``spider``, ``bird`` or ``bundled``) and ``reward_spec.ground_truth`` (the gold SQL). The
database is ``<db_path>/<layout>/<db_id>/<db_id>.sqlite`` where ``<layout>`` is
``SynSQL-2.5M/databases``, ``spider/database`` or ``bird/train/train_databases``; ``bundled``
rows use the databases that ship with this package.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs.sql._bundled import bundled_db_dir
from skyrl_gym.envs.sql._queries import names_table, reads_schema
from skyrl_gym.envs.sql.executor import execute, format_result
from skyrl_gym.envs.sql.reward import grade
from skyrl_gym.envs.sql.types import Grade, QueryStatus, Text2SQLConfig
from skyrl_gym.errors import ConfigError, SandboxError
from skyrl_gym.types import BaseTextEnvStepOutput, ConversationType, EnvExample

__all__ = [
    "Text2SQLEnv",
    "Text2SQLEnvConfig",
    "LAYOUTS",
    "INVALID_ACTION_HINT",
    "format_observation",
    "resolve_db_file",
]

#: The published name of the env's config (``skyrl_gym.envs.sql.env.Text2SQLEnvConfig``): here it
#: is :class:`Text2SQLConfig`, whose ``db_path`` defaults to the bundled databases (published:
#: ``/home/ray/default/sql_data``).
Text2SQLEnvConfig = Text2SQLConfig

#: Where each published data source keeps its databases under ``db_path``.
LAYOUTS: dict[str, str] = {
    "synsql": "SynSQL-2.5M/databases",
    "spider": "spider/database",
    "bird": "bird/train/train_databases",
}
_HOW_TO_GET = {
    "synsql": "the SynSQL-2.5M databases come with OmniSQL's data release (OmniSQL-datasets, data.zip)",
    "spider": "the Spider databases come with the Spider release or OmniSQL's data release (data.zip)",
    "bird": "the BIRD train databases come with the BIRD release (train_databases)",
}
_SQL = re.compile(r"<sql>(.*?)</sql>", re.DOTALL)
#: The observation for a turn with neither a query nor a solution: the published env's sentence,
#: word for word (users' code may match it). It names no tag, so it cannot be mistaken for the
#: model's own text.
INVALID_ACTION_HINT = (
    "Your previous action is invalid. Follow the format of outputting thinking process and sql tool, "
    "and try again."
)
_SCHEMA_ROWS = (
    "SELECT name, sql FROM sqlite_master WHERE type IN ('table', 'view') "
    "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
)


def format_observation(text: str, turns_left: int) -> str:
    """The content of the observation message that answers a query: ``text`` (the result as
    :func:`~skyrl_gym.envs.sql.executor.format_result` writes it, or the invalid-action hint)
    and a reminder of the turns left, as the published env writes it."""
    return (
        f"\n\n<observation>{text}\n<reminder>You have {turns_left} turn{'s' if turns_left != 1 else ''} "
        f"left to complete the task.</reminder></observation>\n\n"
    )


def resolve_db_file(db_id: Any, data: Any, db_path: str | None) -> Path:
    """The SQLite file of a row; :class:`ConfigError` naming the path and the fix when missing."""
    if not isinstance(db_id, str) or not db_id or "/" in db_id or "\\" in db_id or db_id in (".", ".."):
        raise ConfigError(f"extras['db_id'] must be a database name such as 'concert_singer', got {db_id!r}")
    if data == "bundled":
        from skyrl_gym.envs.sql._bundled import bundled_db_ids

        if db_id not in bundled_db_ids():
            raise ConfigError(f"no bundled database {db_id!r}; bundled: {bundled_db_ids()}")
        return bundled_db_dir() / db_id / f"{db_id}.sqlite"
    if data not in LAYOUTS:
        raise ConfigError(
            f"extras['data'] must be one of {['bundled', *LAYOUTS]}, got {data!r} "
            "(it says which layout under db_path holds the database)"
        )
    root = Path(db_path) if db_path else bundled_db_dir()
    db_file = root / LAYOUTS[data] / db_id / f"{db_id}.sqlite"
    if not db_file.is_file():
        raise ConfigError(
            f"database file not found: {db_file}. {_HOW_TO_GET[data]}; unpack it so that "
            f"<db_path>/{LAYOUTS[data]}/<db_id>/<db_id>.sqlite exists and set env_config db_path "
            f"(now {str(root)!r}) to that directory"
        )
    return db_file


class Text2SQLEnv(BaseTextEnv):
    """Text-to-SQL in several turns (SkyRL-SQL): explore with <sql>, answer with <solution>."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__(env_config, extras)
        extras = self.extras
        self.config = Text2SQLConfig.from_sources(env_config, extras)
        self.max_turns = self.config.max_turns
        reward_spec = extras.get("reward_spec")
        gold = reward_spec.get("ground_truth") if isinstance(reward_spec, Mapping) else None
        if not isinstance(gold, str) or not gold.strip():
            raise ConfigError("extras['reward_spec']['ground_truth'] must hold the gold SQL query (a string)")
        self.gold_sql = gold
        self.db_id = extras.get("db_id")
        self.data = extras.get("data", "bundled")
        self.db_file = resolve_db_file(self.db_id, self.data, self.config.db_path)
        # Bundled files are never written once built: skip locking altogether.
        self.limits = (
            replace(self.config.limits, immutable=True) if self.data == "bundled" else self.config.limits
        )
        self._prompt_len = 0
        self.chat_history: ConversationType = []
        self.grade: Grade | None = None
        self._sql_calls = 0
        self._sql_errors = 0
        self._sql_refused = 0
        self._sql_timeouts = 0
        self._no_sql = 0
        self._tables: frozenset[str] | None = None
        self._schema_queries = 0
        self._first_schema_turn: int | None = None
        self._first_use_turn: int | None = None
        self._failed_unfixed = 0
        self._errors_then_fixed = 0

    @classmethod
    def bundled_rows(cls, split: str = "train", n: int = 0, seed: int = 0) -> list[dict[str, Any]]:
        """The bundled questions: ``test`` is the held-out ``eval`` split (other databases)."""
        from skyrl_gym.envs.sql.prompt import load_bundled_rows

        if split not in ("train", "test"):
            raise ConfigError(f"unknown split {split!r}; use 'train' or 'test'")
        rows = [dict(r) for r in load_bundled_rows("train" if split == "train" else "eval")]
        return rows[:n] if n else rows

    @classmethod
    def example(cls) -> EnvExample:
        """A bundled question with its prompt and a solving pair of turns."""
        from skyrl_gym.envs.sql.prompt import load_bundled_rows

        row = next(r for r in load_bundled_rows("train") if r["extra_info"]["difficulty"] == "medium")
        gold = row["reward_spec"]["ground_truth"]
        extras = {k: row[k] for k in ("db_id", "data", "reward_spec", "data_source")}
        return EnvExample(
            env_config={},
            extras=extras,
            prompt=tuple(row["prompt"]),
            good_actions=(
                f"<think>Let me run the query to check its result.</think>\n<sql>{gold}</sql>",
                f"<think>The result answers the question.</think>\n<solution>{gold}</solution>",
            ),
        )

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start the episode; the prompt is used as given (rows carry the full prompt), with the
        database's schema hidden when ``hide_schema`` is on (see the module docstring)."""
        messages = [dict(m) for m in prompt or []]
        if self.config.hide_schema:
            from skyrl_gym.envs.sql.prompt import hide_schema_in_prompt

            rows = self._schema_rows()
            if rows is None:
                raise SandboxError(f"cannot read the schema of {self.db_file} to hide it from the prompt")
            messages = hide_schema_in_prompt(messages, [sql for _, sql in rows if sql], self.db_id)
            self._tables = frozenset(name.lower() for name, _ in rows)
        self.chat_history = list(messages)
        self._prompt_len = len(self.chat_history)
        info = {"db_id": self.db_id, "max_turns": self.max_turns, "hide_schema": self.config.hide_schema}
        return messages, info

    def _schema_rows(self) -> list[tuple[str, str | None]] | None:
        """``(name, CREATE statement)`` of each table and view of the database; None when the
        database cannot be read."""
        result = execute(self.db_file, _SCHEMA_ROWS, limits=self.limits, max_rows=100_000)
        return [(str(name), sql) for name, sql in result.rows] if result.ok else None

    def _note_sql(self, sql: str, *, ran: bool) -> dict[str, bool]:
        """Record one SQL text sent to the database (a query, or the solution when graded) for
        the exploration metrics; returns the turn's ``schema_queried`` and ``uses_table``."""
        if self._tables is None:
            rows = self._schema_rows()  # None: the query will fail too; no table can be named
            self._tables = frozenset(name.lower() for name, _ in rows or ())
        schema = reads_schema(sql)
        uses = not schema and names_table(sql, self._tables)
        if schema and self._first_schema_turn is None:
            self._first_schema_turn = self.turns
        if uses and self._first_use_turn is None:
            self._first_use_turn = self.turns
        if ran:
            self._errors_then_fixed += self._failed_unfixed
            self._failed_unfixed = 0
        else:
            self._failed_unfixed += 1
        return {"schema_queried": schema, "uses_table": uses}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One model turn: run its ``<sql>`` query or grade its ``<solution>``."""
        if not isinstance(action, str):
            action = "" if action is None else str(action)
        self.turns += 1
        self.chat_history.append({"role": "assistant", "content": action})
        solved = "<solution>" in action and "</solution>" in action
        if solved or self.turns >= self.max_turns:
            return self._finish(action, truncated=not solved)
        turns_left = self.max_turns - self.turns
        match = _SQL.search(action)
        # The published shape: the tool's positional arguments (db_id, the query or None, turns left).
        metadata: dict[str, Any] = {
            "tool_group": "SQLCodeExecutorToolGroup",
            "tool_name": "sql",
            "tool_input": (self.db_id, match.group(1) if match else None, turns_left),
        }
        if match is None:
            self._no_sql += 1
            text = INVALID_ACTION_HINT
            metadata["error"] = "no_sql"
            metadata.update(schema_queried=False, uses_table=False)
        else:
            sql = match.group(1).strip()
            result = execute(self.db_file, sql, limits=self.limits, count_up_to=self.limits.count_rows_up_to)
            self._sql_calls += 1
            if result.status is QueryStatus.ERROR:
                self._sql_errors += 1
            elif result.status is QueryStatus.REFUSED:
                self._sql_refused += 1
            elif result.status is QueryStatus.TIMEOUT:
                self._sql_timeouts += 1
            metadata["status"] = str(result.status)
            if not result.ok:
                metadata["error"] = str(result.status)
            metadata.update(self._note_sql(sql, ran=result.ok))
            self._schema_queries += metadata["schema_queried"]
            text = format_result(result, self.limits)
        observation = {"role": "user", "content": format_observation(text, turns_left)}
        self.chat_history.append(observation)
        return BaseTextEnvStepOutput(
            observations=[observation], reward=0.0, done=False, metadata=metadata, truncated=False
        )

    def _finish(self, action: str, *, truncated: bool) -> BaseTextEnvStepOutput:
        # The model's own turns only: an observation (a hint that shows the tags, a row of the
        # database) is not the model's text and must not decide its format.
        turns = [
            m["content"]
            for m in self.chat_history[self._prompt_len :]
            if m.get("role") == "assistant" and isinstance(m.get("content"), str)
        ]
        self.grade = g = grade(
            turns, self.gold_sql, self.db_file, limits=self.limits, row_match=self.config.row_match
        )
        metadata: dict[str, Any] = {
            "format_ok": g.format_ok,
            "solution": g.solution_sql,
            "reward_kind": "malformed" if not g.format_ok else "correct" if g.reward > 0 else "wrong",
        }
        if g.format_error:
            metadata["format_error"] = g.format_error
        if g.predicted is not None:
            metadata["solution_status"] = str(g.predicted.status)
        if g.grading_error:
            metadata["error"] = "grading_error"
            metadata["grading_error"] = g.grading_error
        if g.solution_sql is not None and g.predicted is not None:  # a malformed one is not run
            metadata.update(self._note_sql(g.solution_sql, ran=g.predicted.ok))
        else:
            metadata.update(schema_queried=False, uses_table=False)
        return BaseTextEnvStepOutput(
            observations=[], reward=g.reward, done=True, metadata=metadata, truncated=truncated
        )

    def get_metrics(self) -> dict[str, Any]:
        """``sql_calls``, ``sql_errors``, ``sql_refused``, ``sql_timeouts``, ``no_sql_turns``,
        ``turns``, ``solved`` (reward 1), ``format_ok``, ``truncated``, ``grading_error`` and the
        exploration metrics ``exploration_queries``, ``schema_queried``, ``schema_before_use``,
        ``errors_then_fixed`` and ``recovered`` (see the module docstring)."""
        g = self.grade
        first_schema, first_use = self._first_schema_turn, self._first_use_turn
        explored_first = first_schema is not None and first_use is not None and first_schema < first_use
        return {
            "turns": self.turns,
            "sql_calls": self._sql_calls,
            "sql_errors": self._sql_errors,
            "sql_refused": self._sql_refused,
            "sql_timeouts": self._sql_timeouts,
            "no_sql_turns": self._no_sql,
            "solved": bool(g is not None and g.reward > 0),
            "format_ok": bool(g is not None and g.format_ok),
            "truncated": bool(g is not None and g.solution_sql is None and self.turns >= self.max_turns),
            "grading_error": bool(g is not None and g.grading_error),
            "exploration_queries": self._schema_queries,
            "schema_queried": self._schema_queries > 0,
            "schema_before_use": explored_first,
            "errors_then_fixed": self._errors_then_fixed,
            "recovered": self._errors_then_fixed > 0,
        }
