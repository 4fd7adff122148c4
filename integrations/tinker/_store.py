"""What the server keeps across restarts: a small SQLite database beside the checkpoints.

``<checkpoint_dir>/server.sqlite3`` holds the open sessions, each training model (base model,
LoRA config, metadata, the next ``seq_id`` it expects, how many optimizer steps its latest
durable state has, whether gradients were accumulated since), sampling sessions whose weights
are on disk (a base model or a ``tinker://`` path), the request id given to each recent
``(model_id, seq_id)``, and the results of finished requests until they expire. The weights and
optimizer state of a training model are written after every change to a hidden checkpoint,
``<checkpoint_dir>/<model_id>/weights/.latest`` (a name no client can give, so listings never show
it), in the same atomic way as named checkpoints.

So a server killed with ``kill -9`` and started again on the same checkpoint directory serves the
same sessions and models: a client that retries through the outage goes on with its next request.
What is lost: requests that were running or queued at the kill (their ids are unknown after the
restart, and the client is told to send them again), gradients accumulated by ``forward_backward``
without an ``optim_step`` (the next ``optim_step`` fails and says so, rather than step on nothing),
and in-memory sampling snapshots from ``save_weights_and_get_sampling_client`` (call it again).

WAL mode: a committed write survives the process being killed. One connection, behind a lock,
serves the event loop's thread and the worker thread.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_gym.errors import ConfigError

__all__ = ["Store", "StoredModel", "StoredSession", "LATEST"]

#: The hidden checkpoint name of a training model's latest durable state.
LATEST = ".latest"

_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY, sdk_version TEXT NOT NULL, tags TEXT NOT NULL, last_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS models (
    model_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, base_model TEXT NOT NULL,
    lora TEXT, user_metadata TEXT, next_seq INTEGER NOT NULL DEFAULT 1,
    steps INTEGER NOT NULL DEFAULT 0, durable INTEGER NOT NULL DEFAULT 0,
    grad_pending INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS samplers (
    sampling_session_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, source TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS seq_requests (
    model_id TEXT NOT NULL, seq_id INTEGER NOT NULL, request_id TEXT NOT NULL,
    PRIMARY KEY (model_id, seq_id)
);
CREATE TABLE IF NOT EXISTS results (
    request_id TEXT PRIMARY KEY, kind TEXT NOT NULL, finished REAL NOT NULL,
    json TEXT, bytes BLOB, error TEXT
);
"""


@dataclass(frozen=True)
class StoredSession:
    """A session row."""

    session_id: str
    sdk_version: str
    tags: list[str]
    last_seen: float = 0.0
    """Wall time of its latest request or heartbeat (written at most once a minute)."""


@dataclass(frozen=True)
class StoredModel:
    """A training model row."""

    model_id: str
    session_id: str
    base_model: str
    lora: dict[str, Any] | None
    user_metadata: dict[str, str] | None
    next_seq: int
    """The ``seq_id`` the model's next request has."""
    steps: int
    durable: bool
    """Whether the ``.latest`` checkpoint holds its state (False: it was never built)."""
    grad_pending: bool
    """Gradients were accumulated after the latest durable state (they are lost on a restart)."""


class Store:
    """The server's database (see the module docstring)."""

    def __init__(
        self, checkpoint_dir: str, *, keep_results_s: float, max_result_bytes: int = 64 << 20
    ) -> None:
        Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
        self.path = Path(checkpoint_dir) / "server.sqlite3"
        self.keep_results_s = keep_results_s
        self.max_result_bytes = max_result_bytes
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, _VERSION):
            self._db.close()
            raise ConfigError(
                f"{self.path} was written by another version of this server (schema {version}, this one "
                f"reads {_VERSION}); move it away to start without the runs it holds"
            )
        self._db.executescript(_SCHEMA)
        self._db.execute(f"PRAGMA user_version = {_VERSION}")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection. Idempotent."""
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ sessions
    def add_session(self, session: StoredSession) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO sessions VALUES (?, ?, ?, ?)",
                (session.session_id, session.sdk_version, json.dumps(session.tags), time.time()),
            )

    def touch_session(self, session_id: str) -> None:
        """The session was seen now."""
        with self._tx() as db:
            db.execute("UPDATE sessions SET last_seen = ? WHERE session_id = ?", (time.time(), session_id))

    def drop_session(self, session_id: str) -> list[str]:
        """Forget a finished session, its models and samplers; the model ids it had."""
        with self._tx() as db:
            ids = [
                r[0] for r in db.execute("SELECT model_id FROM models WHERE session_id = ?", (session_id,))
            ]
            db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM models WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM samplers WHERE session_id = ?", (session_id,))
            db.executemany("DELETE FROM seq_requests WHERE model_id = ?", [(m,) for m in ids])
        return ids

    def sessions(self) -> list[StoredSession]:
        with self._lock:
            rows = self._db.execute(
                "SELECT session_id, sdk_version, tags, last_seen FROM sessions"
            ).fetchall()
        return [StoredSession(sid, ver, json.loads(tags), float(seen)) for sid, ver, tags, seen in rows]

    # ------------------------------------------------------------------ models
    def add_model(
        self,
        model_id: str,
        session_id: str,
        base_model: str,
        lora: dict[str, Any] | None,
        user_metadata: dict[str, str] | None,
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO models (model_id, session_id, base_model, lora, user_metadata) "
                "VALUES (?, ?, ?, ?, ?)",
                (model_id, session_id, base_model, _dump(lora), _dump(user_metadata)),
            )

    def drop_model(self, model_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM models WHERE model_id = ?", (model_id,))
            db.execute("DELETE FROM seq_requests WHERE model_id = ?", (model_id,))

    def update_model(self, model_id: str, **values: Any) -> None:
        """Set columns of a model row (``base_model``, ``lora``, ``next_seq``, ``steps``,
        ``durable``, ``grad_pending``)."""
        allowed = {"base_model", "lora", "next_seq", "steps", "durable", "grad_pending"}
        if not values or set(values) - allowed:
            raise ValueError(f"update_model takes {sorted(allowed)}, got {sorted(values)}")
        cols = ", ".join(f"{k} = ?" for k in values)
        args = [_dump(v) if k == "lora" else int(v) if isinstance(v, bool) else v for k, v in values.items()]
        with self._tx() as db:
            db.execute(f"UPDATE models SET {cols} WHERE model_id = ?", (*args, model_id))  # noqa: S608

    def models(self) -> list[StoredModel]:
        with self._lock:
            rows = self._db.execute(
                "SELECT model_id, session_id, base_model, lora, user_metadata, next_seq, steps, durable, "
                "grad_pending FROM models"
            ).fetchall()
        return [
            StoredModel(m, s, b, _load(lo), _load(meta), int(n), int(st), bool(d), bool(g))
            for m, s, b, lo, meta, n, st, d, g in rows
        ]

    def seq_requests(self, model_id: str) -> dict[int, str]:
        """The request ids given to ``model_id``'s recent ``seq_id`` s."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq_id, request_id FROM seq_requests WHERE model_id = ? ORDER BY seq_id", (model_id,)
            ).fetchall()
        return {int(s): r for s, r in rows}

    def add_seq_request(self, model_id: str, seq_id: int, request_id: str, keep: int) -> None:
        """Remember ``seq_id``'s request id (the latest ``keep`` per model are kept)."""
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO seq_requests VALUES (?, ?, ?)", (model_id, seq_id, request_id))
            db.execute(
                "DELETE FROM seq_requests WHERE model_id = ? AND seq_id <= ?", (model_id, seq_id - keep)
            )

    # ------------------------------------------------------------------ sampling sessions
    def add_sampler(self, sampling_session_id: str, session_id: str, source: str) -> None:
        """``source``: ``base:<name>`` or a ``tinker://`` path."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO samplers VALUES (?, ?, ?)", (sampling_session_id, session_id, source)
            )

    def samplers(self) -> list[tuple[str, str, str]]:
        """``(sampling_session_id, session_id, source)`` rows."""
        with self._lock:
            return [tuple(r) for r in self._db.execute("SELECT * FROM samplers").fetchall()]  # type: ignore[misc]

    # ------------------------------------------------------------------ results
    def add_result(
        self, request_id: str, kind: str, result: dict[str, Any] | bytes | None, error: dict[str, Any] | None
    ) -> None:
        """Keep a finished request's result (or error) for ``keep_results_s``; results larger than
        ``max_result_bytes`` are not kept (a re-poll after a restart is then told to resend)."""
        as_json = json.dumps(result) if isinstance(result, dict) else None
        as_bytes = result if isinstance(result, bytes) else None
        if len(as_json or as_bytes or b"") > self.max_result_bytes:
            return
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?)",
                (request_id, kind, now, as_json, as_bytes, _dump(error)),
            )
            db.execute("DELETE FROM results WHERE finished < ?", (now - self.keep_results_s,))

    def result(
        self, request_id: str
    ) -> tuple[str, dict[str, Any] | bytes | None, dict[str, Any] | None] | None:
        """``(kind, result, error)`` of a finished request kept here, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT kind, json, bytes, error FROM results WHERE request_id = ? AND finished >= ?",
                (request_id, time.time() - self.keep_results_s),
            ).fetchone()
        if row is None:
            return None
        kind, as_json, as_bytes, error = row
        return kind, (json.loads(as_json) if as_json is not None else as_bytes), _load(error)


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)
