"""Prompt rows for training and evaluation, and a sampler whose position survives restarts.

``load_rows(env_id, split, n)`` gives rows (``prompt``, ``env_class``, ``reward_spec`` and
extras) for the built-in envs from their bundled generators, or reads a JSONL/Parquet file or a
Hugging Face ``datasets`` dataset with the same columns. :class:`PromptSampler` walks through the
rows in seeded, per-epoch shuffled order; its ``state_dict`` is part of every checkpoint, so a
resumed run neither repeats nor skips a prompt.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyrl_gym.errors import ConfigError

__all__ = ["load_rows", "PromptSampler"]


def _builtin_rows(env_id: str, split: str, n: int, seed: int) -> list[dict[str, Any]] | None:
    if env_id == "calculator":
        from skyrl_gym.envs.calculator import generate_calculator_rows

        return generate_calculator_rows(n, split=split, seed=seed)
    if env_id in ("gsm8k", "gsm8k_multi_turn"):
        from skyrl_gym.envs.math import generate_problems

        return generate_problems(n, split=split, seed=seed, env_class=env_id)
    if env_id == "text2sql":
        try:
            from skyrl_gym.envs.sql import load_bundled_rows  # type: ignore[attr-defined]
        except ImportError:
            return None
        rows = load_bundled_rows(split="train" if split == "train" else "eval")
        return [dict(r) for r in rows][:n] if n else [dict(r) for r in rows]
    return None


def load_rows(
    env_id: str, split: str = "train", n: int = 0, *, path: str | None = None, seed: int = 0
) -> list[dict]:
    """Rows for ``env_id``: from ``path`` (JSONL or Parquet) when given, else the env's bundled data.

    ``n`` > 0 limits the count (generators make exactly ``n``). Each row gets an ``id`` if it
    has none (its index), since the sampler and the logs identify prompts by id."""
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"dataset file {path!r} does not exist")
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(p).to_pylist()
        else:
            rows = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
        rows = rows[:n] if n else rows
    else:
        rows = _builtin_rows(env_id, split, n, seed)
        if rows is None:
            raise ConfigError(
                f"env {env_id!r} has no bundled {split} data; pass a JSONL/Parquet file of rows with "
                "'prompt' (chat messages), 'reward_spec' and the env's extras (--data PATH)"
            )
    for i, row in enumerate(rows):
        if "prompt" not in row:
            raise ConfigError(f"row {i} has no 'prompt' column (a list of chat messages)")
        row.setdefault("id", f"{split}-{i:06d}")
    return rows


class PromptSampler:
    """Seeded, shuffled passes over ``rows``; each prompt appears once per epoch."""

    def __init__(self, rows: Sequence[dict[str, Any]], seed: int = 0) -> None:
        if not rows:
            raise ConfigError("no training rows")
        self.rows = list(rows)
        self.seed = seed
        self.epoch = 0
        self.index = 0
        self._order = self._shuffle(0)

    def _shuffle(self, epoch: int) -> list[int]:
        order = list(range(len(self.rows)))
        random.Random(f"{self.seed}-{epoch}").shuffle(order)
        return order

    def next(self, k: int) -> list[dict[str, Any]]:
        """The next ``k`` rows (crossing into a new, reshuffled epoch when needed)."""
        batch = []
        while len(batch) < k:
            if self.index >= len(self._order):
                self.epoch += 1
                self.index = 0
                self._order = self._shuffle(self.epoch)
            batch.append(self.rows[self._order[self.index]])
            self.index += 1
        return batch

    def state_dict(self) -> dict[str, int]:
        """The position, for checkpoints."""
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed, "num_rows": len(self.rows)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a :meth:`state_dict`; the rows must be the same as when it was saved."""
        if state["num_rows"] != len(self.rows) or state["seed"] != self.seed:
            raise ConfigError(
                f"checkpoint was taken with {state['num_rows']} rows and seed {state['seed']}, this run has "
                f"{len(self.rows)} rows and seed {self.seed}; resume with the same data and seed"
            )
        self.epoch, self.index = state["epoch"], state["index"]
        self._order = self._shuffle(self.epoch)
