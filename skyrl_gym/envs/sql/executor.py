"""A hardened, read-only SQLite executor for model-written SQL.

The published tool opens databases read-write and relies on rolling back a transaction, so a
write is attempted (and ``ATTACH`` or ``VACUUM INTO`` create files). Here, every query:

* runs on a connection opened with ``mode=ro`` (plus ``immutable=1`` for files nobody writes)
  and ``PRAGMA query_only``, in autocommit mode, so nothing can change the file;
* passes a check of its first keyword (write, schema and transaction statements are refused
  before SQLite sees them) and an authorizer that refuses every write, ``ATTACH``/``DETACH``, transactions,
  ``load_extension`` and any pragma outside a read-only list, so a refusal reads as a refusal
  (``QueryStatus.REFUSED`` with the reason), never as an empty result;
* has a deadline enforced by a progress handler in the executing thread: SQLite stops the
  statement itself at the deadline, so no thread is left spinning and the CPU goes back to idle;
* is bounded in memory: per-connection limits on string/blob size, SQL length, expression
  depth, compound selects and attached databases; SQLite's process-wide hard heap limit (``ExecutorLimits.heap_limit_mb``); and a row cap on fetching.

Connections are pooled per thread (an LRU of 4 per thread, keyed by file), so many concurrent
episodes on one file never share a connection and never take a write lock: read-only
connections only ever hold shared locks, so "database is locked" cannot happen.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import threading
import time
import urllib.parse
from collections import OrderedDict
from pathlib import Path
from typing import Any

from skyrl_gym.envs.sql.types import ExecutorLimits, QueryResult, QueryStatus

__all__ = ["ReadOnlyDatabase", "execute", "format_result", "close_thread_connections"]

# Statements refused by their first keyword (after comments) before SQLite sees them; the
# authorizer is the second line of defence. Other words reach SQLite (``SELEC`` is a syntax error).
_REFUSED_FIRST = frozenset(
    {
        "INSERT",
        "UPDATE",
        "DELETE",
        "REPLACE",
        "UPSERT",
        "CREATE",
        "DROP",
        "ALTER",
        "ATTACH",
        "DETACH",
        "VACUUM",
        "REINDEX",
        "ANALYZE",
        "BEGIN",
        "COMMIT",
        "END",
        "ROLLBACK",
        "SAVEPOINT",
        "RELEASE",
    }
)
# Read-only introspection pragmas a model may use (``PRAGMA table_info(t)`` and friends).
_ALLOWED_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "database_list",
        "collation_list",
    }
)
_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})
_LEADING_NOISE = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?(?:\*/|$))*", re.DOTALL)
_FIRST_WORD = re.compile(r"[A-Za-z]+")

_ACTION_NAMES = {
    sqlite3.SQLITE_CREATE_INDEX: "CREATE INDEX",
    sqlite3.SQLITE_CREATE_TABLE: "CREATE TABLE",
    sqlite3.SQLITE_CREATE_TEMP_INDEX: "CREATE TEMP INDEX",
    sqlite3.SQLITE_CREATE_TEMP_TABLE: "CREATE TEMP TABLE",
    sqlite3.SQLITE_CREATE_TEMP_TRIGGER: "CREATE TEMP TRIGGER",
    sqlite3.SQLITE_CREATE_TEMP_VIEW: "CREATE TEMP VIEW",
    sqlite3.SQLITE_CREATE_TRIGGER: "CREATE TRIGGER",
    sqlite3.SQLITE_CREATE_VIEW: "CREATE VIEW",
    sqlite3.SQLITE_DELETE: "DELETE",
    sqlite3.SQLITE_DROP_INDEX: "DROP INDEX",
    sqlite3.SQLITE_DROP_TABLE: "DROP TABLE",
    sqlite3.SQLITE_DROP_TEMP_INDEX: "DROP TEMP INDEX",
    sqlite3.SQLITE_DROP_TEMP_TABLE: "DROP TEMP TABLE",
    sqlite3.SQLITE_DROP_TEMP_TRIGGER: "DROP TEMP TRIGGER",
    sqlite3.SQLITE_DROP_TEMP_VIEW: "DROP TEMP VIEW",
    sqlite3.SQLITE_DROP_TRIGGER: "DROP TRIGGER",
    sqlite3.SQLITE_DROP_VIEW: "DROP VIEW",
    sqlite3.SQLITE_INSERT: "INSERT",
    sqlite3.SQLITE_PRAGMA: "PRAGMA",
    sqlite3.SQLITE_TRANSACTION: "a transaction statement",
    sqlite3.SQLITE_UPDATE: "UPDATE",
    sqlite3.SQLITE_ATTACH: "ATTACH",
    sqlite3.SQLITE_DETACH: "DETACH",
    sqlite3.SQLITE_ALTER_TABLE: "ALTER TABLE",
    sqlite3.SQLITE_REINDEX: "REINDEX",
    sqlite3.SQLITE_ANALYZE: "ANALYZE",
    sqlite3.SQLITE_CREATE_VTABLE: "CREATE VIRTUAL TABLE",
    sqlite3.SQLITE_DROP_VTABLE: "DROP VIRTUAL TABLE",
    sqlite3.SQLITE_FUNCTION: "function",
    sqlite3.SQLITE_SAVEPOINT: "SAVEPOINT",
}
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_temp_master", "sqlite_schema", "sqlite_temp_schema"})
_ALWAYS_OK = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
_REFUSAL_HINT = "the database is read-only here; only SELECT queries run"

_heap_lock = threading.Lock()
_heap_limit_bytes: int | None = None


def _ensure_heap_limit(conn: sqlite3.Connection, limit_mb: int) -> None:
    """Apply SQLite's process-wide hard heap limit; a lower request lowers it, a higher one is
    ignored (SQLite's pragma only ever lowers a limit that is set)."""
    global _heap_limit_bytes
    wanted = int(limit_mb) << 20
    if limit_mb <= 0 or (_heap_limit_bytes is not None and wanted >= _heap_limit_bytes):
        return
    with _heap_lock:
        if _heap_limit_bytes is None or wanted < _heap_limit_bytes:
            conn.execute(f"PRAGMA hard_heap_limit = {wanted}")
            _heap_limit_bytes = int(conn.execute("PRAGMA hard_heap_limit").fetchone()[0])


class _Guard:
    """Per-connection state read by the authorizer and the progress handler."""

    __slots__ = ("deadline", "refusal", "timed_out")

    def __init__(self) -> None:
        self.deadline = math.inf
        self.refusal: str | None = None
        self.timed_out = False

    def authorize(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None
    ) -> int:
        if action in _ALWAYS_OK:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if arg2 is not None and arg2.lower() in _DENIED_FUNCTIONS:
                self.refusal = f"the function {arg2}() is not allowed"
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in _ALLOWED_PRAGMAS:
                return sqlite3.SQLITE_OK
            self.refusal = f"PRAGMA {name} is not allowed (only read-only schema pragmas such as table_info)"
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_UPDATE and arg1 in _SCHEMA_TABLES:
            # SQLite asks this while preparing table-valued pragmas (pragma_table_info): ignoring
            # the column keeps any real change impossible without refusing the read.
            return sqlite3.SQLITE_IGNORE
        what = _ACTION_NAMES.get(action, f"operation {action}")
        target = (
            f" on {arg1}"
            if arg1 and action not in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_ATTACH)
            else ""
        )
        self.refusal = f"{what}{target} is not allowed: {_REFUSAL_HINT}"
        return sqlite3.SQLITE_DENY

    def progress(self) -> int:
        if time.monotonic() > self.deadline:
            self.timed_out = True
            return 1
        return 0


def _decode_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


class ReadOnlyDatabase:
    """One read-only, hardened connection to a SQLite file. Use from the thread that made it.

    Most code calls :func:`execute`, which keeps one of these per thread and file.
    """

    def __init__(
        self, path: str | Path, limits: ExecutorLimits | None = None, *, immutable: bool | None = None
    ) -> None:
        self.path = Path(path).resolve()
        self.limits = limits or ExecutorLimits()
        immutable = self.limits.immutable if immutable is None else immutable
        if not self.path.is_file():
            from skyrl_gym.errors import ConfigError

            raise ConfigError(f"SQLite database not found: {self.path}")
        query = "mode=ro&immutable=1" if immutable else "mode=ro"
        uri = f"file:{urllib.parse.quote(str(self.path))}?{query}"
        self._guard = _Guard()
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0, cached_statements=64)
        except sqlite3.Error as exc:
            from skyrl_gym.errors import SandboxError

            raise SandboxError(
                f"cannot open {self.path} read-only: {exc}. A WAL-mode database needs its -shm file "
                "or a writable directory; convert it with PRAGMA journal_mode=DELETE"
            ) from exc
        try:
            conn.execute("PRAGMA query_only = ON")
            conn.execute(f"PRAGMA temp_store = {self.limits.temp_store.upper()}")
            conn.execute("PRAGMA trusted_schema = OFF")
            _ensure_heap_limit(conn, self.limits.heap_limit_mb)
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.limits.max_value_bytes)
            conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, self.limits.max_sql_chars)
            conn.setlimit(sqlite3.SQLITE_LIMIT_EXPR_DEPTH, 200)
            conn.setlimit(sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 100)
            conn.set_authorizer(self._guard.authorize)
            conn.set_progress_handler(self._guard.progress, self.limits.progress_interval)
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    # ------------------------------------------------------------------ queries
    def run(self, sql: str, *, timeout_s: float, max_rows: int, count_up_to: int = 0) -> QueryResult:
        """Run one statement with a deadline; fetch at most ``max_rows`` rows.

        ``count_up_to`` > ``max_rows`` also counts the remaining rows up to that many. Never
        raises for anything in ``sql``: failures come back as a :class:`QueryResult`."""
        start = time.perf_counter()
        conn = self._conn
        if conn is None:
            raise RuntimeError("ReadOnlyDatabase is closed")
        rejected = _precheck(sql, self.limits.max_sql_chars)
        if rejected is not None:
            return QueryResult(rejected[0], message=rejected[1], elapsed_s=time.perf_counter() - start)
        guard = self._guard
        guard.refusal = None
        guard.timed_out = False
        guard.deadline = time.monotonic() + timeout_s
        try:
            try:
                return self._fetch(conn, sql, max_rows, count_up_to, start)
            except sqlite3.OperationalError as exc:
                # Text that is not UTF-8: decode it with replacement characters, on this query only
                # (a Python decoder per value is slower than the built-in one, so it is not the default).
                if conn.text_factory is not str or "decode" not in str(exc):
                    raise
                conn.text_factory = _decode_text
                try:
                    return self._fetch(conn, sql, max_rows, count_up_to, start)
                finally:
                    conn.text_factory = str
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as exc:
            return self._failure(exc, timeout_s, time.perf_counter() - start)
        finally:
            guard.deadline = math.inf

    @staticmethod
    def _fetch(
        conn: sqlite3.Connection, sql: str, max_rows: int, count_up_to: int, start: float
    ) -> QueryResult:
        cursor = conn.execute(sql)
        try:
            columns = tuple(d[0] for d in cursor.description) if cursor.description else ()
            rows = cursor.fetchmany(max_rows + 1)
            more = len(rows) > max_rows
            seen = len(rows)
            exhausted = not more
            if more:
                rows = rows[:max_rows]
                while seen < count_up_to:
                    batch = cursor.fetchmany(min(1000, count_up_to - seen + 1))
                    if not batch:
                        exhausted = True
                        break
                    seen += len(batch)
            total = seen if exhausted else None
            return QueryResult(
                QueryStatus.OK, columns, tuple(rows), more, total, seen, "", time.perf_counter() - start
            )
        finally:
            cursor.close()

    def _failure(self, exc: BaseException, timeout_s: float, elapsed: float) -> QueryResult:
        guard = self._guard
        if guard.refusal is not None:
            return QueryResult(QueryStatus.REFUSED, message=guard.refusal, elapsed_s=elapsed)
        if guard.timed_out:
            return QueryResult(
                QueryStatus.TIMEOUT,
                message=f"the query was stopped after its {timeout_s:g} s time limit; simplify it",
                elapsed_s=elapsed,
            )
        if isinstance(exc, MemoryError):
            message = "out of memory: the query needs too much memory; simplify it"
        elif isinstance(exc, sqlite3.DatabaseError) and "readonly" in str(exc):
            return QueryResult(QueryStatus.REFUSED, message=f"{exc}: {_REFUSAL_HINT}", elapsed_s=elapsed)
        else:
            message = f"{type(exc).__name__}: {exc}" if not isinstance(exc, sqlite3.Error) else str(exc)
        return QueryResult(QueryStatus.ERROR, message=message, elapsed_s=elapsed)

    def schema(self) -> list[str]:
        """The ``CREATE`` statements of the tables and views (for prompts)."""
        result = self.run(
            "SELECT sql FROM sqlite_master WHERE type IN ('table', 'view') AND sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid",
            timeout_s=self.limits.explore_timeout_s,
            max_rows=10_000,
        )
        return [row[0] for row in result.rows]

    def close(self) -> None:
        """Close the connection. Idempotent."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> ReadOnlyDatabase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _precheck(sql: str, max_chars: int) -> tuple[QueryStatus, str] | None:
    """Reject ``sql`` before SQLite sees it: not text, too long, empty, or a write statement."""
    if not isinstance(sql, str):
        return QueryStatus.ERROR, f"the query must be text, got {type(sql).__name__}"
    if len(sql) > max_chars:
        return QueryStatus.REFUSED, f"the query is {len(sql)} characters long; the limit is {max_chars}"
    head = sql[_LEADING_NOISE.match(sql).end() :]  # type: ignore[union-attr]
    if not head:
        return QueryStatus.ERROR, "the query is empty"
    match = _FIRST_WORD.match(head)
    if match is not None and match.group(0).upper() in _REFUSED_FIRST:
        return QueryStatus.REFUSED, f"{match.group(0).upper()} statements are not allowed: {_REFUSAL_HINT}"
    return None


# ---------------------------------------------------------------------- per-thread pool
_POOL_SIZE = 4  # open connections per thread (each holds a file descriptor)
_local = threading.local()


def _thread_pool() -> OrderedDict[tuple[str, bool, ExecutorLimits], ReadOnlyDatabase]:
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = OrderedDict()
    return pool


def _connection(path: str | Path, limits: ExecutorLimits, immutable: bool) -> ReadOnlyDatabase:
    key = (os.fspath(path), immutable, limits)
    pool = _thread_pool()
    db = pool.get(key)
    if db is not None:
        pool.move_to_end(key)
        return db
    db = ReadOnlyDatabase(path, limits, immutable=immutable)
    pool[key] = db
    while len(pool) > _POOL_SIZE:
        _, old = pool.popitem(last=False)
        old.close()
    return db


def execute(
    path: str | Path,
    sql: str,
    *,
    limits: ExecutorLimits | None = None,
    timeout_s: float | None = None,
    max_rows: int | None = None,
    count_up_to: int = 0,
    immutable: bool | None = None,
) -> QueryResult:
    """Run ``sql`` read-only on the SQLite file ``path`` from this thread's pooled connection.

    ``timeout_s`` defaults to ``limits.explore_timeout_s`` and ``max_rows`` to
    ``limits.max_rows``. Raises :class:`~skyrl_gym.errors.ConfigError` only when the file is
    missing; everything the SQL does comes back as a :class:`QueryResult`."""
    limits = limits or ExecutorLimits()
    db = _connection(path, limits, limits.immutable if immutable is None else immutable)
    return db.run(
        sql,
        timeout_s=limits.explore_timeout_s if timeout_s is None else timeout_s,
        max_rows=limits.max_rows if max_rows is None else max_rows,
        count_up_to=count_up_to,
    )


def close_thread_connections() -> None:
    """Close this thread's pooled connections (they are also closed when the thread ends)."""
    pool = _thread_pool()
    while pool:
        _, db = pool.popitem()
        db.close()


# ---------------------------------------------------------------------- formatting
def _cell(value: Any, max_chars: int) -> str:
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is str:
        text = value
    elif value is None:
        return "NULL"
    elif kind is float:
        text = repr(value) if math.isfinite(value) else str(value)
    elif isinstance(value, bytes):
        return f"<blob {len(value)} bytes>"
    else:
        text = str(value)
    if "\n" in text or "|" in text:
        text = text.replace("\n", "\\n").replace("|", "\\|")
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return text


def _clip(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def format_result(result: QueryResult, limits: ExecutorLimits | None = None) -> str:
    """The text a model sees for ``result``: a ``|``-separated table, or the failure.

    At most ``limits.max_rows`` rows and about ``limits.max_chars`` characters are shown; a
    last line says how many rows the result has when some are not shown."""
    limits = limits or ExecutorLimits()
    if result.status is QueryStatus.REFUSED:
        return f"Refused: {result.message}"
    if result.status is QueryStatus.TIMEOUT:
        return f"Timeout: {result.message}"
    if result.status is QueryStatus.ERROR:
        return f"Error: {result.message}"
    if not result.columns:
        return "The statement ran and returned no result set."
    cap = limits.max_cell_chars
    width = (limits.max_chars - 1) // 2  # a header or a row takes at most half the budget
    lines = [_clip(" | ".join(_cell(c, cap) for c in result.columns), width)]
    size = len(lines[0])
    shown = 0
    for row in result.rows[: limits.max_rows]:
        line = _clip(" | ".join(_cell(v, cap) for v in row), width)
        if size + len(line) + 1 > limits.max_chars and shown > 0:
            break
        lines.append(line)
        size += len(line) + 1
        shown += 1
    if not result.rows:
        lines.append("(no rows)")
    elif shown < len(result.rows) or result.more_rows:
        if result.total_rows is not None:
            total = f"{result.total_rows}"
        else:
            total = f"more than {max(result.rows_seen - 1, len(result.rows))}"
        lines.append(f"({shown} of {total} rows shown)")
    return "\n".join(lines)
