"""The bundled text2sql data: databases built from SQL text on first use, and question rows.

The databases are committed as SQL text (``data/<db_id>.sql``, made by ``_make_data.py``) and
built into ``<cache>/sql/<hash>/<db_id>/<db_id>.sqlite``, where ``<hash>`` covers the SQL
text, so an edited file gets a fresh build. A build writes a temporary file next to the target
and renames it into place, so concurrent first use (threads or processes) is safe and a reader
never sees a half-built file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from skyrl_gym.errors import ConfigError

__all__ = ["DATA_DIR", "bundled_db_ids", "bundled_db_dir", "bundled_questions", "cache_root"]

DATA_DIR = Path(__file__).parent / "data"
_build_lock = threading.Lock()


def bundled_db_ids() -> list[str]:
    """The ids of the bundled databases (one ``data/<db_id>.sql`` each)."""
    return sorted(p.stem for p in DATA_DIR.glob("*.sql"))


def cache_root() -> Path:
    """``$SKYRL_CACHE_DIR``, else ``$XDG_CACHE_HOME/skyrl``, else ``~/.cache/skyrl``."""
    if os.environ.get("SKYRL_CACHE_DIR"):
        return Path(os.environ["SKYRL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "skyrl"


@lru_cache(maxsize=1)
def _content_hash() -> str:
    digest = hashlib.sha256()
    for db_id in bundled_db_ids():
        digest.update(db_id.encode())
        digest.update((DATA_DIR / f"{db_id}.sql").read_bytes())
    return digest.hexdigest()[:16]


def _build(sql_file: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        try:
            conn.executescript(sql_file.read_text(encoding="utf-8"))
            conn.commit()
        finally:
            conn.close()
        os.chmod(tmp, 0o444)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def bundled_db_dir(root: Path | None = None) -> Path:
    """The directory holding ``<db_id>/<db_id>.sqlite`` for every bundled database, built if needed."""
    base = (root or cache_root()) / "sql" / _content_hash()
    missing = [d for d in bundled_db_ids() if not (base / d / f"{d}.sqlite").is_file()]
    if missing:
        with _build_lock:
            for db_id in missing:
                target = base / db_id / f"{db_id}.sqlite"
                if not target.is_file():
                    try:
                        _build(DATA_DIR / f"{db_id}.sql", target)
                    except OSError as exc:
                        raise ConfigError(
                            f"cannot build the bundled database {db_id!r} under {base}: {exc}. "
                            "Set SKYRL_CACHE_DIR to a writable directory"
                        ) from exc
    return base


@lru_cache(maxsize=1)
def _question_records() -> tuple[dict[str, Any], ...]:
    with open(DATA_DIR / "questions.jsonl", encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def bundled_questions(split: Literal["train", "eval", "all"] = "all") -> list[dict[str, Any]]:
    """The bundled questions (``id``, ``db_id``, ``difficulty``, ``split``, ``question``, ``sql``)."""
    if split not in ("train", "eval", "all"):
        raise ConfigError(f"split must be 'train', 'eval' or 'all', got {split!r}")
    return [dict(r) for r in _question_records() if split == "all" or r["split"] == split]
