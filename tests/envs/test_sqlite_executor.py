"""The hardened SQLite executor, on real SQLite files."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyrl_gym.envs.sql import ExecutorLimits, QueryStatus, ReadOnlyDatabase, execute, format_result


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def db_file(tmp_path: Path) -> Path:
    path = tmp_path / "shop" / "shop.sqlite"
    path.parent.mkdir()
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, note TEXT);
        CREATE TABLE nums (n INTEGER);
        """
    )
    conn.executemany(
        "INSERT INTO items VALUES (?, ?, ?, ?)", [(i, f"item{i}", i * 1.5, "x" * i) for i in range(1, 301)]
    )
    conn.executemany("INSERT INTO nums VALUES (?)", [(i,) for i in range(1000)])
    conn.execute("INSERT INTO items VALUES (1000, CAST(x'ff41fe' AS TEXT), 0, NULL)")
    conn.commit()
    conn.close()
    return path


WRITES = [
    "INSERT INTO items VALUES (5000, 'new', 1, 'n')",
    "INSERT INTO items SELECT id + 10000, name, price, note FROM items",
    "REPLACE INTO items VALUES (1, 'x', 1, 'x')",
    "INSERT INTO items VALUES (6000, 'r', 1, 'r') RETURNING id",
    "UPDATE items SET price = 0",
    "DELETE FROM items",
    "WITH doomed AS (SELECT 1) DELETE FROM items",
    "WITH c AS (SELECT 1) INSERT INTO nums SELECT * FROM c",
    "EXPLAIN DELETE FROM items",
    "CREATE TABLE t (x)",
    "CREATE TEMP TABLE t (x)",
    "CREATE INDEX i ON items(name)",
    "CREATE VIEW v AS SELECT 1",
    "CREATE TRIGGER tr AFTER INSERT ON items BEGIN SELECT 1; END",
    "CREATE VIRTUAL TABLE f USING fts5(x)",
    "DROP TABLE items",
    "ALTER TABLE items ADD COLUMN y",
    "ALTER TABLE items RENAME TO gone",
    "VACUUM",
    "REINDEX",
    "ANALYZE",
    "BEGIN",
    "BEGIN IMMEDIATE",
    "COMMIT",
    "SAVEPOINT s",
    "PRAGMA query_only = OFF",
    "PRAGMA journal_mode = WAL",
    "PRAGMA user_version = 7",
    "PRAGMA writable_schema = ON",
    "PRAGMA hard_heap_limit = 0",
    "DETACH DATABASE main",
    "SELECT load_extension('libnothing')",
    "/* comment */ -- line\n  delete from items",
]


@pytest.mark.parametrize("immutable", [False, True])
def test_every_write_form_is_refused_and_the_file_is_unchanged(db_file: Path, immutable: bool):
    before = _sha(db_file)
    files_before = sorted(os.listdir(db_file.parent))
    limits = ExecutorLimits(immutable=immutable)
    for sql in WRITES:
        result = execute(db_file, sql, limits=limits)
        assert result.status is QueryStatus.REFUSED, (sql, result)
        text = format_result(result)
        assert text.startswith("Refused: ") and "not allowed" in text, (sql, text)
    # The file and its directory are exactly as before; the connection still answers.
    assert _sha(db_file) == before
    assert sorted(os.listdir(db_file.parent)) == files_before
    assert execute(db_file, "SELECT COUNT(*) FROM items", limits=limits).rows == ((301,),)


def test_refusal_is_not_an_empty_result(db_file: Path):
    refused = execute(db_file, "WITH c AS (SELECT 1) DELETE FROM items WHERE 0")
    empty = execute(db_file, "SELECT * FROM items WHERE 0")
    assert refused.status is QueryStatus.REFUSED and "DELETE" in refused.message
    assert empty.status is QueryStatus.OK and empty.rows == () and empty.columns
    assert format_result(refused).startswith("Refused:")
    assert "(no rows)" in format_result(empty)


def test_attach_and_vacuum_into_create_no_file(db_file: Path, tmp_path: Path):
    targets = [tmp_path / "attached.db", tmp_path / "uri.db", tmp_path / "vacuumed.db"]
    for sql in [
        f"ATTACH DATABASE '{targets[0]}' AS a",
        f"ATTACH 'file:{targets[1]}?mode=rwc' AS b",
        f"VACUUM INTO '{targets[2]}'",
        f"SELECT 1; ATTACH '{targets[0]}' AS c",
    ]:
        result = execute(db_file, sql)
        assert result.status in (QueryStatus.REFUSED, QueryStatus.ERROR), (sql, result)
    assert not any(t.exists() for t in targets)
    # Bypassing the statement allowlist, the authorizer alone refuses ATTACH (VACUUM INTO needs it).
    with ReadOnlyDatabase(db_file) as db:
        conn = db._conn
        with pytest.raises(sqlite3.DatabaseError, match="not authorized|authorization denied"):
            conn.execute(f"VACUUM INTO '{targets[2]}'")
        with pytest.raises(sqlite3.DatabaseError, match="not authorized|authorization denied"):
            conn.execute(f"ATTACH '{targets[0]}' AS z")
    assert not any(t.exists() for t in targets)


def test_read_only_pragmas_and_errors_are_observations(db_file: Path):
    info = execute(db_file, "PRAGMA table_info(items)")
    assert info.ok and [r[1] for r in info.rows] == ["id", "name", "price", "note"]
    assert execute(db_file, "SELECT * FROM pragma_table_info('items')").ok
    for bad in [
        "SELEC 1",
        "SELECT nope FROM items",
        "SELECT\x00 1",
        "SELECT '\ud800'",
        "",
        "SELECT 1; SELECT 2",
    ]:
        result = execute(db_file, bad)
        assert result.status is QueryStatus.ERROR, (bad, result)
        assert format_result(result).startswith("Error: ")
    too_big = execute(db_file, "SELECT length(randomblob(50000000))")
    assert too_big.status is QueryStatus.ERROR and "too big" in too_big.message
    long_sql = "SELECT " + "+".join(["1"] * 60_000)
    assert execute(db_file, long_sql).status is QueryStatus.REFUSED


def test_row_and_character_caps(db_file: Path):
    limits = ExecutorLimits(max_rows=50, max_chars=2000, max_cell_chars=40)
    result = execute(db_file, "SELECT id, note FROM items", limits=limits, count_up_to=10_000)
    assert result.ok and len(result.rows) == 50 and result.more_rows and result.total_rows == 301
    text = format_result(result, limits)
    assert len(text) <= 2000 + 100
    assert text.splitlines()[-1].endswith("of 301 rows shown)")
    assert "…" in text  # long notes are cut per cell
    wide_sql = "SELECT " + ", ".join(f"note AS c{i}" for i in range(300)) + " FROM items WHERE id = 300"
    wide = format_result(execute(db_file, wide_sql), limits)
    assert len(wide) <= 2000 and wide.count("\n") == 1
    uncounted = execute(db_file, "SELECT n FROM nums", max_rows=10)
    assert uncounted.more_rows and uncounted.total_rows is None
    assert format_result(uncounted).splitlines()[-1] == "(10 of more than 10 rows shown)"


def test_invalid_utf8_text_is_replaced_not_an_error(db_file: Path):
    result = execute(db_file, "SELECT name FROM items WHERE id = 1000")
    assert result.ok and result.rows[0][0] == "\ufffdA\ufffd"


def test_short_deadline_interrupts_quickly(db_file: Path):
    start = time.monotonic()
    result = execute(db_file, "SELECT count(*) FROM nums a, nums b, nums c", timeout_s=0.3)
    elapsed = time.monotonic() - start
    assert result.status is QueryStatus.TIMEOUT and "0.3 s" in result.message
    assert 0.25 <= elapsed < 2.0
    assert format_result(result).startswith("Timeout: ")
    # The connection is usable right after an interrupt.
    assert execute(db_file, "SELECT COUNT(*) FROM nums").rows == ((1000,),)


@pytest.mark.slow
def test_runaway_queries_stop_at_five_seconds_and_cpu_goes_idle(db_file: Path):
    queries = {
        "cross join": "SELECT count(*) FROM nums a CROSS JOIN nums b CROSS JOIN nums c CROSS JOIN nums d",
        "recursive cte": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c",
    }
    results: dict[str, tuple] = {}

    def run(name: str, sql: str) -> None:
        start = time.monotonic()
        result = execute(db_file, sql)  # the default exploring deadline: 5 s
        results[name] = (result, time.monotonic() - start)

    threads = [threading.Thread(target=run, args=item) for item in queries.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    for name, (result, elapsed) in results.items():
        assert result.status is QueryStatus.TIMEOUT, (name, result)
        assert 4.0 <= elapsed <= 6.0, (name, elapsed)
    # Nothing keeps running: this process uses (almost) no CPU afterwards.
    cpu_before = time.process_time()
    time.sleep(1.0)
    assert time.process_time() - cpu_before < 0.2


def test_concurrent_readers_never_see_locks(db_file: Path):
    queries = [
        "SELECT COUNT(*), SUM(price) FROM items",
        "SELECT name FROM items WHERE id % 37 = 0",
        "SELECT n % 7, COUNT(*) FROM nums GROUP BY 1",
        "SELECT a.id FROM items a JOIN items b ON a.id = b.id + 1 WHERE a.price > 400",
    ]
    serial = [execute(db_file, q, max_rows=1000) for q in queries]

    def worker(i: int) -> list:
        return [execute(db_file, q, max_rows=1000) for q in queries[i % 4 :] + queries[: i % 4]]

    with ThreadPoolExecutor(max_workers=64) as pool:
        outs = list(pool.map(worker, range(256)))
    for i, out in enumerate(outs):
        expected = serial[i % 4 :] + serial[: i % 4]
        assert [(r.status, r.rows) for r in out] == [(r.status, r.rows) for r in expected]


def test_heap_limit_turns_a_memory_hog_into_an_error(db_file: Path, tmp_path: Path):
    # The heap limit is process-wide, so try it in a fresh interpreter with a small limit.
    script = f"""
import sqlite3
from skyrl_gym.envs.sql import ExecutorLimits, execute, QueryStatus
limits = ExecutorLimits(heap_limit_mb=64, grade_timeout_s=60, temp_store="memory")
sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 3000000) SELECT COUNT(DISTINCT randomblob(100)) FROM c"
r = execute({str(db_file)!r}, sql, limits=limits, timeout_s=60)
print(r.status, r.message)
print(sqlite3.connect(':memory:').execute('PRAGMA hard_heap_limit').fetchone()[0])
print(execute({str(db_file)!r}, "SELECT COUNT(*) FROM items", limits=limits).rows)
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("error") and "memory" in lines[0], lines
    assert lines[1] == str(64 << 20)
    assert lines[2] == "((301,),)"


_KEYWORDS = [
    "INSERT INTO items",
    "UPDATE items SET",
    "DELETE FROM",
    "DROP",
    "CREATE",
    "ATTACH",
    "PRAGMA",
    "VACUUM",
    "WITH x AS (SELECT 1)",
    "SELECT",
    "EXPLAIN",
    "BEGIN",
    "REPLACE",
    ";",
    "--",
    "/*",
    "'",
    "(",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.sampled_from(_KEYWORDS), st.text(max_size=12)), max_size=8))
def test_fuzzed_statements_never_raise_or_write(db_file: Path, parts: list[str]):
    before = _sha(db_file)
    result = execute(db_file, " ".join(parts), timeout_s=0.5)
    assert result.status in set(QueryStatus)
    if result.ok:
        assert not result.columns or isinstance(result.rows, tuple)
    assert _sha(db_file) == before
    assert sorted(os.listdir(db_file.parent)) == ["shop.sqlite"]
