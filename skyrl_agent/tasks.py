"""Task datasets: rows with the published column conventions to and from :class:`PromptItem`.

A row (one task) has the columns the published SkyRL datasets use:

* ``prompt``: the first chat messages (a list of ``{"role", "content"}``), or a string (one
  user message);
* ``env_class`` (or ``env_id``): the registered env id, or an env class of one's own as
  ``"package.module:Class"`` (see :mod:`skyrl_gym.user_envs`); ``load_tasks(..., env_id=...)``
  overrides it;
* ``reward_spec``: ``{"method": "rule", "ground_truth": ...}``, how the env scores the episode;
* ``extra_info``: free-form task data (a split, an index, a database name...);
* optional ``env_config`` (the env's config), ``id`` (the row id, else its position) and
  ``extras`` (a dict merged into the env's extras).

Every column other than ``prompt``, ``env_class``/``env_id``, ``env_config``, ``id`` and
``extras`` (so ``reward_spec``, ``extra_info``, ``data_source``...) reaches the env in its
``extras``, as the published runtime passes them.

Sources: JSONL (``.jsonl``/``.json``, one row a line), Parquet (``.parquet``, or a directory of
them), a directory written by ``datasets.Dataset.save_to_disk``, a ``datasets.Dataset`` (or a
``DatasetDict`` with ``split``), or a list of dicts. Parquet and ``datasets`` need the
``training`` extra.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from skyrl_agent.types import PromptItem
from skyrl_gym.errors import ConfigError

__all__ = [
    "row_to_item",
    "item_to_row",
    "load_tasks",
    "save_tasks",
    "tasks_to_dataset",
    "with_env_config",
    "check_env_ids",
]

#: Columns that are not passed on in the env's extras.
_OWN_COLUMNS = frozenset({"prompt", "env_class", "env_id", "env_config", "id", "extras"})


def _plain(value: Any) -> Any:
    """Arrow/NumPy values (from Parquet or ``datasets``) as plain Python lists and dicts."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _messages(prompt: Any, where: str) -> tuple[dict[str, Any], ...]:
    if isinstance(prompt, str):
        return ({"role": "user", "content": prompt},)
    if not isinstance(prompt, list) or not prompt:
        raise ConfigError(f"{where}: 'prompt' must be a non-empty list of chat messages or a string")
    out = []
    for i, m in enumerate(prompt):
        if not isinstance(m, Mapping) or "role" not in m:
            raise ConfigError(f"{where}: prompt[{i}] must be a message with a 'role', got {m!r}")
        # a Parquet struct column gives every message every key seen in the column: drop the
        # ones this message did not have (None), except content
        out.append({k: v for k, v in m.items() if v is not None or k == "content"})
    return tuple(out)


def row_to_item(
    row: Mapping[str, Any],
    *,
    env_id: str | None = None,
    default_id: str = "",
    where: str = "row",
    default_env_id: str | None = None,
) -> PromptItem:
    """One row with the published columns as a :class:`PromptItem` (see the module docstring).

    ``env_id`` overrides the row's ``env_class``; ``default_env_id`` is used only for a row
    without one."""
    row = _plain(dict(row))
    if "prompt" not in row:
        raise ConfigError(f"{where}: no 'prompt' column (a list of chat messages or a string)")
    prompt = _messages(row["prompt"], where)
    row_env = env_id or row.get("env_class") or row.get("env_id") or default_env_id
    if not row_env:
        raise ConfigError(f"{where}: no env id; add 'env_class' to the row or pass env_id (--env)")
    extras = {k: v for k, v in row.items() if k not in _OWN_COLUMNS}
    extras.update(row.get("extras") or {})
    row_id = row.get("id")
    return PromptItem(
        str(row_env),
        prompt,
        dict(row.get("env_config") or {}),
        extras,
        str(row_id) if row_id is not None else default_id,
    )


def item_to_row(item: PromptItem) -> dict[str, Any]:
    """A :class:`PromptItem` as a row with the published columns (``prompt``, ``env_class``,
    ``reward_spec``, ``extra_info``, the other extras as their own columns, ``env_config``
    when set, ``id``); :func:`row_to_item` inverts it."""
    row: dict[str, Any] = {
        "id": item.prompt_id,
        "env_class": item.env_id,
        "prompt": [dict(m) for m in item.prompt],
    }
    for key, value in item.extras.items():
        if key in _OWN_COLUMNS:  # an extra named like a column cannot be a column of its own
            row.setdefault("extras", {})[key] = value
        else:
            row[key] = value
    if item.env_config:
        row["env_config"] = dict(item.env_config)
    return row


def _rows_of(source: Any, split: str | None) -> Iterable[tuple[Mapping[str, Any], str, str]]:
    """(row, default id, where) for each row of ``source``."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise ConfigError(f"task file {str(path)!r} does not exist")
        if path.is_dir():
            if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
                from skyrl_gym.errors import require

                datasets: Any = require("datasets", "training", "reading a saved datasets.Dataset")
                yield from _rows_of(datasets.load_from_disk(str(path)), split)
                return
            files = sorted(path.glob("*.parquet"))
            if not files:
                raise ConfigError(
                    f"{path}: a directory of tasks needs .parquet files or a saved datasets.Dataset"
                )
            for f in files:
                yield from _rows_of(f, split)
            return
        if path.suffix == ".parquet":
            from skyrl_gym.errors import require

            pq: Any = require("pyarrow.parquet", "training", "reading Parquet tasks")
            for i, row in enumerate(pq.read_table(str(path)).to_pylist()):
                yield row, str(i), f"{path}: row {i}"
            return
        if path.suffix not in (".jsonl", ".json"):
            raise ConfigError(
                f"{path}: tasks are read from .jsonl, .json or .parquet files, not {path.suffix!r}"
            )
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise ConfigError(f"{path}:{lineno}: not a JSON object: {exc}") from exc
                yield row, str(lineno - 1), f"{path}:{lineno}"
        return
    if isinstance(source, Mapping):  # a datasets.DatasetDict: pick the split
        names = list(source.keys())
        if split is None:
            if len(names) != 1:
                raise ConfigError(f"this dataset has splits {names}; pass split=...")
            split = names[0]
        if split not in source:
            raise ConfigError(f"no split {split!r}; this dataset has {names}")
        yield from _rows_of(source[split], None)
        return
    for i, row in enumerate(source):  # a datasets.Dataset, an IterableDataset, a list of dicts
        yield row, str(i), f"row {i}"


def load_tasks(
    source: str | os.PathLike[str] | Any,
    *,
    env_id: str | None = None,
    limit: int | None = None,
    split: str | None = None,
    default_env_id: str | None = None,
) -> list[PromptItem]:
    """Read tasks from ``source`` (see the module docstring) as :class:`PromptItem` objects.

    ``env_id`` overrides the rows' ``env_class``; ``default_env_id`` names the env of rows that
    have none; ``limit`` keeps the first rows; ``split`` picks a split of a ``DatasetDict``."""
    items = []
    for row, default_id, where in _rows_of(source, split):
        if limit is not None and len(items) >= limit:
            break
        if not isinstance(row, Mapping):
            raise ConfigError(
                f"{where}: a task row must be an object with a 'prompt', got {type(row).__name__}"
            )
        items.append(
            row_to_item(row, env_id=env_id, default_id=default_id, where=where, default_env_id=default_env_id)
        )
    return items


def check_env_ids(items: Iterable[PromptItem]) -> None:
    """Look up the env of every task (:func:`skyrl_gym.spec`), so that an unknown id fails with
    its "did you mean" before a model loads, and a ``"module:Class"`` id is imported and
    registered now rather than inside the first episode (where a failure would only mask it)."""
    from skyrl_gym.registration import spec

    for env_id in sorted({item.env_id for item in items}):
        spec(env_id)


def with_env_config(
    items: Sequence[PromptItem], env_config: Mapping[str, Any] | None = None
) -> list[PromptItem]:
    """The tasks with a run-wide ``env_config`` (``--env-config KEY=VALUE``) under each task's
    own: a row's ``env_config`` wins key by key.

    A key ``ENV.KEY`` whose prefix is a registered env id applies to that env's tasks only
    (``text2sql.db_path=/data``), as the published config has one section per env class; a
    dataset that mixes envs can so give each its settings; an entry-point id scopes a key the
    same way (``my_pkg.envs:MyEnv.db_path=/data``). Other keys apply to every task."""
    if not env_config:
        return list(items)
    from skyrl_gym.registration import registry

    shared: dict[str, Any] = {}
    scoped: dict[str, dict[str, Any]] = {}
    for key, value in env_config.items():
        key = str(key)
        if ":" in key:  # an entry-point id has dots of its own: the scope ends at the first one after ':'
            module, _, tail = key.partition(":")
            name, dot, rest = tail.partition(".")
            prefix, known = f"{module}:{name}", True  # registered on first use, maybe not yet
        else:
            prefix, dot, rest = key.partition(".")
            known = prefix in registry
        if dot and rest and known:
            scoped.setdefault(prefix, {})[rest] = value
        else:
            shared[key] = value
    return [
        dataclasses.replace(item, env_config={**shared, **scoped.get(item.env_id, {}), **item.env_config})
        for item in items
    ]


def tasks_to_dataset(items: Sequence[PromptItem]) -> Any:
    """A ``datasets.Dataset`` of the items' rows (``training`` extra). Parquet needs one type
    per column: give ``reward_spec.ground_truth`` the same type in every row."""
    from skyrl_gym.errors import require

    datasets: Any = require("datasets", "training", "tasks as a datasets.Dataset")
    return datasets.Dataset.from_list([item_to_row(i) for i in items])


def save_tasks(items: Sequence[PromptItem], path: str | os.PathLike[str]) -> Path:
    """Write tasks as JSONL (``.jsonl``) or Parquet (``.parquet``); :func:`load_tasks` reads them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        tasks_to_dataset(items).to_parquet(str(path))
    elif path.suffix in (".jsonl", ".json"):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for item in items:
                f.write(json.dumps(item_to_row(item), ensure_ascii=False) + "\n")
        tmp.replace(path)
    else:
        raise ConfigError(f"tasks are written as .jsonl or .parquet, not {path.name!r}")
    return path
