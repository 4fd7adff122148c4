"""Trajectories to and from JSONL, Parquet and ``datasets.Dataset``.

JSONL is the native format (one :meth:`Trajectory.to_json` per line, no extra dependency).
Parquet and ``datasets`` need the ``training`` extra (pyarrow, datasets).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from skyrl_agent.types import Trajectory

__all__ = [
    "save_jsonl",
    "load_jsonl",
    "save_parquet",
    "load_parquet",
    "to_dataset",
    "from_dataset",
]


def save_jsonl(trajectories: Iterable[Trajectory], path: str | os.PathLike[str]) -> Path:
    """Write one JSON line per trajectory (atomically: a temp file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for t in trajectories:
            f.write(t.to_json())
            f.write("\n")
    tmp.replace(path)
    return path


def load_jsonl(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Read a file written by :func:`save_jsonl`."""
    out = []
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Trajectory.from_json(line))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a trajectory: {exc}") from exc
    return out


# Columns whose values are nested dicts of arbitrary shape (or may be None) are stored as JSON strings, so the
# Arrow schema stays fixed whatever an env puts in its metrics.
_JSON_COLUMNS = ("env_metrics", "messages", "segments", "turns", "failure", "session")


def _to_rows(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    rows = []
    for t in trajectories:
        d = t.to_dict()
        for col in _JSON_COLUMNS:
            d[col] = json.dumps(d[col], ensure_ascii=False)
        rows.append(d)
    return rows


def _from_row(row: dict[str, Any]) -> Trajectory:
    d = dict(row)
    for col in _JSON_COLUMNS:
        if isinstance(d.get(col), str):
            d[col] = json.loads(d[col])
    return Trajectory.from_dict(d)


def to_dataset(trajectories: Iterable[Trajectory]) -> Any:
    """A ``datasets.Dataset`` with one row per trajectory (``env_metrics``/``messages`` as JSON)."""
    from skyrl_gym.errors import require

    datasets: Any = require("datasets", "training", "trajectories as a datasets.Dataset")
    rows = _to_rows(trajectories)
    if not rows:
        return datasets.Dataset.from_dict({})
    return datasets.Dataset.from_list(rows)


def from_dataset(dataset: Any) -> list[Trajectory]:
    """Inverse of :func:`to_dataset`."""
    return [_from_row(row) for row in dataset]


def save_parquet(trajectories: Iterable[Trajectory], path: str | os.PathLike[str]) -> Path:
    """Write a Parquet file (via ``datasets``/pyarrow)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    to_dataset(trajectories).to_parquet(str(path))
    return path


def load_parquet(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Read a file written by :func:`save_parquet`."""
    from skyrl_gym.errors import require

    pq: Any = require("pyarrow.parquet", "training", "reading Parquet trajectories")
    return [_from_row(row) for row in pq.read_table(str(path)).to_pylist()]
