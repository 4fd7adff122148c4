"""Tasks for training and evaluation, and a sampler whose position survives restarts.

``load_items(env_id, split, n)`` gives the tasks (:class:`~skyrl_agent.types.PromptItem`) of a
run: the env's bundled rows (its ``bundled_rows`` hook), or a JSONL/Parquet file or a saved
Hugging Face ``datasets`` dataset with the published columns, read by
:func:`skyrl_agent.tasks.load_tasks` (the one path from a row to an episode).
:class:`PromptSampler` walks through the tasks in seeded, per-epoch shuffled order, optionally
stratified (each kind of row spread evenly through the epoch, so no stretch of steps trains on one
kind only); its ``state_dict`` is part of every checkpoint, so a resumed run neither repeats nor
skips a prompt.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyrl_agent.tasks import load_tasks, row_to_item
from skyrl_agent.types import PromptItem
from skyrl_gym.errors import ConfigError

__all__ = ["load_items", "PromptSampler", "stratify_key"]


def _builtin_rows(env_id: str, split: str, n: int, seed: int) -> list[dict[str, Any]] | None:
    """The env's own rows (``BaseTextEnv.bundled_rows``), each naming ``env_id`` as its env."""
    from skyrl_gym.registration import spec

    hook = getattr(spec(env_id).load(), "bundled_rows", None)
    rows = hook(split, n, seed) if callable(hook) else None
    if rows is None:
        return None
    return [{**row, "env_class": env_id} for row in rows]


def load_items(
    env_id: str, split: str = "train", n: int = 0, *, path: str | None = None, seed: int = 0
) -> list[PromptItem]:
    """Training or held-out tasks: read from ``path`` when given (any source
    :func:`skyrl_agent.tasks.load_tasks` reads: JSONL, Parquet, a saved ``datasets`` directory),
    else the bundled rows of ``env_id`` (its ``bundled_rows`` hook).

    A row's own ``env_class`` and ``env_config`` are kept (``env_id`` is the env of rows that
    name none), so a dataset that mixes envs trains as it is. ``n`` > 0 limits the count
    (generators make exactly ``n``). A task without an ``id`` is named by its position
    (``<split>-<index>`` for bundled rows), since the sampler and the logs identify prompts by id."""
    if path is not None:
        if not Path(path).exists():
            raise ConfigError(f"dataset file {path!r} does not exist")
        return load_tasks(path, limit=n or None, default_env_id=env_id)
    rows = _builtin_rows(env_id, split, n, seed)
    if rows is None:
        raise ConfigError(
            f"env {env_id!r} has no bundled {split} data; pass a JSONL/Parquet file of rows with "
            "'prompt' (chat messages), 'reward_spec' and the env's extras (--data PATH)"
        )
    return [
        row_to_item(row, where=f"{env_id} bundled row {i}", default_id=f"{split}-{i:06d}")
        for i, row in enumerate(rows)
    ]


def stratify_key(stratify_by: str, env_id: str, path: str | None) -> str | None:
    """The row field to stratify training prompts by, from ``--stratify-by``: ``auto`` is the
    env's ``bundled_stratify_by`` for its bundled rows (``path`` None) and none for a data file;
    ``none`` (or empty) is none; anything else is the field itself."""
    if stratify_by in ("", "none"):
        return None
    if stratify_by != "auto":
        return stratify_by
    if path is not None:
        return None
    from skyrl_gym.registration import spec

    return getattr(spec(env_id).load(), "bundled_stratify_by", None)


class PromptSampler:
    """Seeded, shuffled passes over ``rows``; each prompt appears once per epoch.

    ``stratify_by``: a row field (a key of :attr:`PromptItem.extras`, e.g. the calculator's
    ``shape`` or a mixed dataset's ``data_source``) whose kinds are spread evenly through every
    epoch: the ``j``-th of a kind's ``n`` shuffled rows goes to position ``(j + u) / n`` of the
    epoch (``u`` a random offset per kind), so any ``m`` consecutive prompts hold about ``m`` times
    each kind's share (within 2). A plain shuffle can put one kind in the first steps and leave
    another out for many (the main job's seed 3: results/main-job/history.md, "Seed 3, looked at closely")."""

    def __init__(self, rows: Sequence[PromptItem], seed: int = 0, stratify_by: str | None = None) -> None:
        if not rows:
            raise ConfigError("no training rows")
        self.rows = list(rows)
        self.seed = seed
        self.stratify_by = stratify_by or None
        self._kinds = None if self.stratify_by is None else [_kind(r, self.stratify_by) for r in self.rows]
        self.epoch = 0
        self.index = 0
        self._order = self._shuffle(0)

    def _shuffle(self, epoch: int) -> list[int]:
        order = list(range(len(self.rows)))
        rng = random.Random(f"{self.seed}-{epoch}")
        rng.shuffle(order)
        if self._kinds is None:
            return order
        by_kind: dict[str, list[int]] = defaultdict(list)
        for i in order:
            by_kind[self._kinds[i]].append(i)
        placed = []  # (position in the epoch, tie-break, row)
        for tie, members in enumerate(by_kind.values()):
            offset = rng.random()
            placed += [((j + offset) / len(members), tie, i) for j, i in enumerate(members)]
        return [i for _, _, i in sorted(placed)]

    def next(self, k: int) -> list[PromptItem]:
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

    def state_dict(self) -> dict[str, Any]:
        """The position, for checkpoints."""
        state: dict[str, Any] = {
            "epoch": self.epoch,
            "index": self.index,
            "seed": self.seed,
            "num_rows": len(self.rows),
        }
        if self.stratify_by is not None:
            state["stratify_by"] = self.stratify_by
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict`; the rows must be the same as when it was saved."""
        if state["num_rows"] != len(self.rows) or state["seed"] != self.seed:
            raise ConfigError(
                f"checkpoint was taken with {state['num_rows']} rows and seed {state['seed']}, this run has "
                f"{len(self.rows)} rows and seed {self.seed}; resume with the same data and seed"
            )
        if state.get("stratify_by") != self.stratify_by:
            raise ConfigError(
                f"checkpoint was taken with stratify_by={state.get('stratify_by')!r}, this run has "
                f"{self.stratify_by!r}; resume with --stratify-by {state.get('stratify_by') or 'none'}"
            )
        self.epoch, self.index = state["epoch"], state["index"]
        self._order = self._shuffle(self.epoch)


def _kind(row: PromptItem, key: str) -> str:
    if key not in row.extras:
        raise ConfigError(
            f"stratify_by={key!r}: row {row.prompt_id!r} has no field {key!r}; "
            f"give every training row that field or drop --stratify-by"
        )
    return str(row.extras[key])
