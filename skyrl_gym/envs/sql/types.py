"""Data types of the text2sql env: configs, query results, grades."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

__all__ = [
    "QueryStatus",
    "QueryResult",
    "ExecutorLimits",
    "Text2SQLConfig",
    "Grade",
    "DataSource",
    "RowMatch",
]

#: Where a row's database lives under ``db_path`` (the published layouts plus our bundled data).
DataSource = Literal["bundled", "synsql", "spider", "bird"]
#: How the predicted and the gold result are compared (see ``reward.rows_match``).
RowMatch = Literal["set", "multiset"]


class QueryStatus(StrEnum):
    """How one query ended."""

    OK = "ok"
    """It ran; ``rows`` holds (part of) the result."""
    ERROR = "error"
    """SQLite rejected or failed it (syntax error, unknown column, out of memory...)."""
    REFUSED = "refused"
    """The executor refused it: a write, ``ATTACH``, ``load_extension``, a pragma change..."""
    TIMEOUT = "timeout"
    """It ran past its deadline and was interrupted."""


@dataclass(frozen=True)
class QueryResult:
    """The outcome of one query on a read-only database."""

    status: QueryStatus
    """How the query ended."""
    columns: tuple[str, ...] = ()
    """Column names of the result (empty unless ``status`` is OK)."""
    rows: tuple[tuple[Any, ...], ...] = ()
    """The rows fetched, at most the ``max_rows`` the caller asked for."""
    more_rows: bool = False
    """True when the result had more rows than were fetched."""
    total_rows: int | None = None
    """Rows in the whole result when known (observations count up to a cap), else None."""
    rows_seen: int = 0
    """Rows SQLite produced before fetching stopped (a lower bound when ``total_rows`` is None)."""
    message: str = ""
    """What went wrong, for the model (empty when OK)."""
    elapsed_s: float = 0.0
    """Wall time spent executing and fetching."""

    @property
    def ok(self) -> bool:
        """True when the query ran to completion."""
        return self.status is QueryStatus.OK


@dataclass(frozen=True)
class ExecutorLimits:
    """Limits of the hardened SQLite executor. They come from the env config, never the model."""

    explore_timeout_s: float = 5.0
    """Deadline of a query the model runs while exploring (``<sql>``)."""
    grade_timeout_s: float = 30.0
    """Deadline of each of the two queries run for the reward (gold and predicted)."""
    max_rows: int = 50
    """Rows shown in an observation; more are counted and reported, not shown."""
    count_rows_up_to: int = 10_000
    """An observation counts result rows up to this many (within the deadline)."""
    max_chars: int = 9_000
    """Characters of the result table in an observation; rows past it are cut."""
    max_cell_chars: int = 200
    """Characters of one value in an observation; longer values are cut with an ellipsis."""
    grade_max_rows: int = 1_000_000
    """Rows fetched when grading; a larger result cannot be graded (predicted: reward 0)."""
    max_sql_chars: int = 100_000
    """Longest SQL text accepted (SQLite's ``SQLITE_LIMIT_SQL_LENGTH`` on the connection)."""
    max_value_bytes: int = 10_000_000
    """Largest string or blob a query may build (``SQLITE_LIMIT_LENGTH`` on the connection)."""
    heap_limit_mb: int = 1024
    """SQLite's hard heap limit in MiB. SQLite has no per-connection heap limit: this one is
    process-wide, set once on first use, and only ever lowered. 0 leaves it alone."""
    progress_interval: int = 1000
    """SQLite VM instructions between two deadline checks (lower: more exact, slower)."""
    temp_store: Literal["file", "memory"] = "file"
    """Where sorts and temporary b-trees go. ``file`` (SQLite's default) is the fastest here;
    a runaway sort is then bounded by the deadline and the disk. ``memory`` also bounds it by the
    heap limit, at about a third more time on GROUP BY and DISTINCT queries."""
    immutable: bool = False
    """Open databases with ``immutable=1`` (no locking at all). Only for files nobody writes
    while episodes run; the bundled databases always use it."""

    def __post_init__(self) -> None:
        from skyrl_gym.errors import ConfigError

        for name in ("explore_timeout_s", "grade_timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        for name in (
            "max_rows",
            "count_rows_up_to",
            "max_chars",
            "max_cell_chars",
            "grade_max_rows",
            "max_sql_chars",
            "max_value_bytes",
            "progress_interval",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        if self.temp_store not in ("file", "memory"):
            raise ConfigError(f"temp_store must be 'file' or 'memory', got {self.temp_store!r}")
        if not (isinstance(self.heap_limit_mb, int) and self.heap_limit_mb >= 0):
            raise ConfigError(
                f"heap_limit_mb must be an int >= 0 (0: leave unset), got {self.heap_limit_mb!r}"
            )


@dataclass(frozen=True)
class Text2SQLConfig:
    """Env-wide settings of ``text2sql`` (``env_config``; ``max_turns`` may also come per row)."""

    db_path: str | None = None
    """Root of the published data layouts (``SynSQL-2.5M/databases``, ``spider/database``,
    ``bird/train/train_databases``). None: the bundled databases' directory. Rows whose ``data``
    is ``bundled`` always use the bundled databases."""
    max_turns: int = 5
    """Turns per episode; the episode ends on a ``<solution>`` or here."""
    row_match: RowMatch = "set"
    """``set``: rows compared as sets, as the published recipe does (order and duplicates
    ignored). ``multiset``: order ignored, duplicates counted."""
    limits: ExecutorLimits = field(default_factory=ExecutorLimits)
    """Executor limits (deadlines, row and character caps, heap limit)."""
    hide_schema: bool = False
    """Hide the database's tables and columns from the prompt: the env replaces the schema block
    of the row's prompt with one sentence that names the database and says how to explore it
    with SQL (``sqlite_master``, ``PRAGMA table_info``). See :mod:`skyrl_gym.envs.sql.env`."""

    def __post_init__(self) -> None:
        from skyrl_gym.errors import ConfigError

        if not (
            isinstance(self.max_turns, int) and not isinstance(self.max_turns, bool) and self.max_turns >= 1
        ):
            raise ConfigError(f"max_turns must be an int >= 1, got {self.max_turns!r}")
        if self.row_match not in ("set", "multiset"):
            raise ConfigError(f"row_match must be 'set' or 'multiset', got {self.row_match!r}")
        if not isinstance(self.hide_schema, bool):
            raise ConfigError(
                f"text2sql env_config hide_schema must be true or false, got {self.hide_schema!r}; "
                "set hide_schema: true (--env-config hide_schema=true) to hide the schema from the "
                "prompt, or leave it out to show it"
            )

    @classmethod
    def from_sources(cls, env_config: Any, extras: Mapping[str, Any]) -> Text2SQLConfig:
        """Read ``env_config`` (dict, ``ConfigView`` or OmegaConf) and the row's ``max_turns``.

        Limit fields (``explore_timeout_s``, ``max_rows``...) may be given at the top level of
        ``env_config`` or under ``env_config.limits``."""
        from skyrl_gym.config import config_get, config_items, without_env_class
        from skyrl_gym.errors import ConfigError, did_you_mean

        limit_keys = tuple(ExecutorLimits.__dataclass_fields__)
        own_keys = tuple(cls.__dataclass_fields__)
        known = (*own_keys, *limit_keys)
        for key in without_env_class(config_items(env_config, "text2sql env_config"), "text2sql"):
            if key not in known:
                raise ConfigError(
                    f"unknown text2sql env_config key {key!r}.{did_you_mean(key, known)} "
                    f"Known keys: {', '.join(sorted(known))}"
                )
        nested = config_get(env_config, "limits", None)
        if isinstance(nested, ExecutorLimits):
            nested = {name: getattr(nested, name) for name in limit_keys}
        for key in config_items(nested, "text2sql env_config limits"):
            if key not in limit_keys:
                raise ConfigError(
                    f"unknown text2sql env_config limits key {key!r}.{did_you_mean(key, limit_keys)} "
                    f"Known keys: {', '.join(sorted(limit_keys))}"
                )
        limit_values: dict[str, Any] = {}
        for name in ExecutorLimits.__dataclass_fields__:
            value = config_get(env_config, name, None)
            if nested is not None:
                value = config_get(nested, name, value)
            if value is not None:
                limit_values[name] = value
        max_turns = extras.get("max_turns") if extras else None
        if max_turns is None:
            max_turns = config_get(env_config, "max_turns", 5)
        db_path = config_get(env_config, "db_path", None)
        return cls(
            db_path=str(db_path) if db_path is not None else None,
            max_turns=int(max_turns) if isinstance(max_turns, str) and max_turns.isdigit() else max_turns,
            row_match=config_get(env_config, "row_match", "set"),
            limits=ExecutorLimits(**limit_values),
            hide_schema=_as_bool(config_get(env_config, "hide_schema", False)),
        )


def _as_bool(value: Any) -> Any:
    """``true``/``false`` (any case) and 0/1 as bools, as ``--env-config`` and YAML files write
    them; anything else is returned as is, for ``__post_init__`` to refuse by name."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if type(value) is int and value in (0, 1):
        return bool(value)
    return value


@dataclass(frozen=True)
class Grade:
    """The reward of a finished episode and why."""

    reward: float
    """-1 malformed, 0 wrong (or ungradable), 1 correct."""
    format_ok: bool
    """The trajectory has the required shape (see ``reward.check_format``)."""
    format_error: str = ""
    """Why the format is wrong (empty when it is right)."""
    solution_sql: str | None = None
    """The SQL inside ``<solution>``, when there is one."""
    predicted: QueryResult | None = None
    """The predicted SQL's result, when it was run."""
    grading_error: str = ""
    """Set when the gold SQL itself failed: the reward is 0 but the episode should not be
    trained on as a wrong answer (a data problem, not the model's)."""
