"""Config files for ``skyrl train --config FILE`` (decision 0033).

A file holds :class:`~trainers.config.TrainConfig` fields by their flag names (``max_turns`` or
``max-turns``), in TOML, YAML or JSON (by its suffix; a run directory's ``config.json`` is one).
Tables are headings only: ``[rollouts]`` followed by ``max_turns = 10`` sets ``max_turns``, so a
file can group its settings as it likes (a heading may share a setting's name, ``[model]`` or
``[data]``: no setting but ``env_config`` takes a table). ``env_config`` may be a table of its
own::

    env = "kvchain"
    steps = 3

    [rollouts]
    max_turns = 10
    stop = ["</lookup>", "</answer>"]

    [env_config]            # the same as --env-config hops=3 text2sql.db_path=/data
    hops = 3
    text2sql = { db_path = "/data" }

What wins, lowest first: the defaults; with ``--resume``, the run directory's ``config.json``
(the resolved config of the run being continued, so its flags need not be given again); each
``--config`` file in order; the flags given on the command line. A key that is not a field, or a
value of the wrong type, is a :class:`~skyrl_gym.errors.ConfigError` naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skyrl_gym.errors import ConfigError, did_you_mean

__all__ = ["config_of_args", "read_config_file", "resolve_train_config", "settable_fields"]

SUFFIXES = (".toml", ".yaml", ".yml", ".json")


def settable_fields(cls: type) -> dict[str, Any]:
    """The settings a file may set, by flat name, with their types: for
    :class:`~trainers.config.TrainConfig` its settings (:func:`trainers.config.accepted_settings`),
    for another dataclass its fields."""
    table = getattr(cls, "settings_table", None)
    if table is not None:
        return {name: s.hint for name, s in table().items()}
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _part_keys(cls: type) -> dict[str, dict[str, str]]:
    """For :class:`~trainers.config.TrainConfig`: each part's table keys (flat names and field
    names) and the flat name each stands for."""
    table = getattr(cls, "settings_table", None)
    if table is None:
        return {}
    parts: dict[str, dict[str, str]] = {f.name: {} for f in dataclasses.fields(cls)}
    for name, s in table().items():
        parts[s.part].setdefault(s.path[-1], name)
        parts[s.part][name] = name
    return parts


def _parse(path: Path) -> Any:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ConfigError(
            f"config file {path}: unknown format {suffix or '(no suffix)'!r}; name it .toml, .yaml, .yml or .json"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} could not be read: {exc}") from None
    try:
        if suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        if suffix == ".json":
            return json.loads(text)
        import yaml

        return yaml.safe_load(text) or {}
    except Exception as exc:  # noqa: BLE001 - each parser's own error type
        raise ConfigError(f"config file {path} is not valid {suffix[1:].upper()}: {exc}") from None


def read_config_file(path: str | os.PathLike[str], cls: type) -> dict[str, Any]:
    """The fields of ``cls`` (:class:`~trainers.config.TrainConfig`) set by the config file
    ``path``, checked and in their types (lists become tuples, an ``env_config`` table becomes
    ``KEY=VALUE`` items)."""
    path = Path(path)
    data = _parse(path)
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {path} must hold a table of settings, not {type(data).__name__}")
    fields = settable_fields(cls)
    parts = _part_keys(cls)
    out: dict[str, Any] = {}

    def take(key: str, value: Any, where: str, part: str | None = None) -> None:
        name = str(key).replace("-", "_")
        if isinstance(value, Mapping) and not where and name != "env_config":
            for k, v in value.items():  # a part's table, or a heading: its keys are settings
                take(k, v, f"[{key}] ", name if name in parts else None)
            return
        if part is not None:
            if name not in parts[part]:
                home = [p for p, keys in parts.items() if name in keys]
                raise ConfigError(
                    f"config file {path}: {where}{key!r} is not a setting of [{part}]"
                    + (f"; it belongs in [{home[0]}]" if home else did_you_mean(name, parts[part]) or "")
                    + " (or put it at the top level)"
                )
            name = parts[part][name]
        if name not in fields:
            raise ConfigError(
                f"config file {path}: {where}{key!r} is not a setting of skyrl train."
                f"{did_you_mean(name, fields) or ''} (`skyrl train --help` lists them; a table is a "
                "heading whose keys are settings)"
            )
        if name in out:
            raise ConfigError(f"config file {path}: {name!r} is set twice")
        out[name] = _coerce(name, value, fields[name], f"config file {path}: {where}{key!r}")

    for key, value in data.items():
        take(key, value, "")
    return out


def _coerce(name: str, value: Any, hint: Any, where: str) -> Any:
    """``value`` as the field's type, or a ``ConfigError`` saying what was expected."""
    if name == "env_config" and isinstance(value, Mapping):
        return tuple(_env_config_items(value, where))
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and type(None) in args:
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where} must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if origin in (tuple, list):
        item = args[0] if args else str
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ConfigError(f"{where} must be a list, e.g. [{_EXAMPLES[item]}], got {value!r}")
        return tuple(_scalar(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if hint in (bool, int, float, str):
        return _scalar(value, hint, where)
    raise ConfigError(f"{where} cannot be set from a config file")


def _scalar(value: Any, kind: type, where: str) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{where} must be {_NAMES[kind]} (e.g. {_EXAMPLES[kind]}), got {value!r}")


_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
_EXAMPLES = {bool: "true", int: "8", float: "0.5", str: '"text"'}


def _env_config_items(table: Mapping[str, Any], where: str, prefix: str = "") -> list[str]:
    """``{"hops": 3, "text2sql": {"db_path": "/d"}}`` -> ``["hops=3", "text2sql.db_path=/d"]``."""
    items = []
    for key, value in table.items():
        if isinstance(value, Mapping) and not prefix:  # one env's own keys: ENV.KEY=VALUE
            items += _env_config_items(value, where, f"{key}.")
            continue
        if isinstance(value, str):
            try:  # a string that would read back as JSON (a number, true) keeps its quotes
                json.loads(value)
                text = json.dumps(value)
            except json.JSONDecodeError:
                text = value
        else:
            try:
                text = json.dumps(value)
            except TypeError:
                raise ConfigError(
                    f"{where}: env_config {prefix}{key} = {value!r} is not a JSON value"
                ) from None
        items.append(f"{prefix}{key}={text}")
    return items


def resolve_train_config(cls: type, files: Sequence[str | os.PathLike[str]], given: Mapping[str, Any]) -> Any:
    """The config (``cls``: :class:`~trainers.config.TrainConfig`) of ``skyrl train``: the
    defaults, then (with ``resume``) the run directory's ``config.json``, then ``files`` in
    order, then the flags ``given`` (module docstring)."""
    merged: dict[str, Any] = {}
    for f in files:
        merged.update(read_config_file(f, cls))
    merged.update(given)
    defaults = cls().as_settings()
    saved = Path(merged.get("run_dir") or defaults["run_dir"]) / "config.json"
    if merged.get("resume", defaults["resume"]) and saved.exists():
        merged = {**read_config_file(saved, cls), **merged}
    return cls(**merged)


def config_of_args(cls: type, args: Any) -> Any:
    """The config of parsed ``skyrl train`` arguments: their ``--config`` files (and, with
    ``--resume``, the run's saved config) under the flags given."""
    from skyrl_gym.config import given_fields

    given = given_fields(cls, args, settable_fields(cls))
    return resolve_train_config(cls, getattr(args, "config_files", None) or [], given)
