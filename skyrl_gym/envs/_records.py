"""Helpers every env shares for its data: bundled JSONL records with a ``split`` field, and a
row's ground truth."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["split_records", "ground_truth"]


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


def ground_truth(extras: Any, fix: str, keys: tuple[str, ...] = ("reward_spec",)) -> Any:
    """``extras[key]["ground_truth"]`` for the first of ``keys`` that has one (published rows put
    it under ``reward_spec``; AIME's under ``reward_model``). Missing: ``ConfigError(fix)``, where
    ``fix`` says what the env needs."""
    from skyrl_gym.errors import ConfigError

    for key in keys:
        spec = extras.get(key) if isinstance(extras, Mapping) else None
        if isinstance(spec, Mapping) and spec.get("ground_truth") is not None:
            return spec["ground_truth"]
    raise ConfigError(fix)
