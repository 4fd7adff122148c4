"""Reading a bundled JSONL file of records that carry a ``split`` field (one helper for every env)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["split_records"]


def split_records(
    path: Path, split: str, splits: tuple[str, ...] = ("train", "test")
) -> Iterator[dict[str, Any]]:
    """Yield the records of ``path`` (JSON lines) whose ``split`` is ``split``, in file order;
    ``split="all"`` yields every record. An unknown ``split`` raises ``ValueError`` naming the
    choices."""
    if split != "all" and split not in splits:
        choices = ", ".join(repr(s) for s in (*splits, "all"))
        raise ValueError(f"unknown split {split!r}; use one of {choices}")
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            if split == "all" or record["split"] == split:
                yield record
