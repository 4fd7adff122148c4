"""Reading env configs that are plain dicts or attribute-style objects."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["ConfigView", "config_get", "config_items", "parse_env_config"]

_MISSING = object()


class ConfigView(dict):
    """A dict that also allows attribute access (``cfg.db_path``), recursively.

    Published envs read their config as ``env_config.db_path`` (an OmegaConf ``DictConfig``);
    wrapping a plain dict in a ``ConfigView`` lets them run on a dict. Missing attributes raise
    ``AttributeError`` naming the keys that exist.
    """

    @classmethod
    def wrap(cls, value: Any) -> Any:
        """Wrap plain dicts (not other mappings such as ``DictConfig``); ``None`` becomes empty."""
        if value is None:
            return cls()
        if type(value) is dict:
            return cls(value)
        return value

    def __getitem__(self, key: Any) -> Any:
        value = super().__getitem__(key)
        return ConfigView(value) if type(value) is dict else value

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"config has no key {name!r}; keys: {sorted(self)}") from None

    def __reduce__(self):  # noqa: ANN204 - pickles as a ConfigView
        return (ConfigView, (dict(self),))


def config_get(cfg: Any, key: str, default: Any = _MISSING) -> Any:
    """``cfg[key]`` for mappings, ``getattr(cfg, key)`` otherwise, else ``default``.

    Raises ``KeyError`` when the key is missing and no default is given."""
    if cfg is None:
        value = _MISSING
    elif isinstance(cfg, Mapping):
        value = cfg.get(key, _MISSING) if hasattr(cfg, "get") else cfg[key] if key in cfg else _MISSING
    else:
        value = getattr(cfg, key, _MISSING)
    if value is _MISSING or value is None and default is not _MISSING:
        if default is _MISSING:
            raise KeyError(f"config value {key!r} is required but missing")
        return default
    return value


def config_items(cfg: Any, what: str = "env_config") -> dict[str, Any]:
    """The keys a config sets, with their values: a mapping (dict, ``ConfigView``, OmegaConf
    ``DictConfig``), a dataclass instance (such as the published ``SearchEnvConfig``) or an
    object with attributes. ``None`` sets nothing. Used to refuse unknown keys by name."""
    from skyrl_gym.errors import ConfigError

    if cfg is None:
        return {}
    if isinstance(cfg, Mapping) or (hasattr(cfg, "keys") and hasattr(cfg, "__getitem__")):
        return {str(k): cfg[k] for k in cfg.keys()}
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    if hasattr(cfg, "__dict__"):
        return {k: v for k, v in vars(cfg).items() if not k.startswith("_")}
    raise ConfigError(
        f"{what} must be a mapping (a dict, an OmegaConf DictConfig) or a dataclass, got {type(cfg).__name__}"
    )


def without_env_class(items: dict[str, Any], env_id: str) -> dict[str, Any]:
    """``items`` without ``env_class``. Published SkyRL configs and tests carry the env's class
    inside its own section (``env_config=DictConfig({"env_class": "searchcode"})``); that key is
    accepted when it names ``env_id`` and refused, with both names, when it names another env."""
    from skyrl_gym.errors import ConfigError

    if "env_class" not in items:
        return items
    value = items["env_class"]
    if value is not None and str(value) != env_id:
        raise ConfigError(
            f"{env_id} env_config names env_class={value!r}, another env: drop the key, "
            f"or make env {value!r} instead"
        )
    return {k: v for k, v in items.items() if k != "env_class"}


def parse_env_config(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``("max_turns=3", "db_dir=/d")`` -> ``{"max_turns": 3, "db_dir": "/d"}``: each VALUE is
    read as JSON when it parses (numbers, booleans, lists), else kept as a string."""
    from skyrl_gym.errors import ConfigError

    if isinstance(items, str):
        raise ConfigError("env_config must be a tuple of 'KEY=VALUE' strings, e.g. ('max_turns=3',)")
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = str(item).partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"env_config item {item!r} is not KEY=VALUE (e.g. max_turns=3)")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


# --------------------------------------------------------------------------- configs on the CLI
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (read from its source), by field name."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        tree = ast.parse(source)
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, nxt in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def add_config_arguments(parser: Any, cls: type, *, exclude: tuple[str, ...] = ()) -> None:
    """Add one ``--field-name`` flag per field of the dataclass ``cls``, with its docstring as help.

    Booleans get ``--flag/--no-flag``; ``X | None`` fields take a value of type X; ``Literal``
    fields take one of their choices. Defaults are left as ``None`` so that
    :func:`config_from_args` can tell which flags were given."""
    import dataclasses
    import typing

    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in exclude or not f.init:
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        add_setting_argument(parser, f.name, hints[f.name], docs.get(f.name, ""), default)


def add_setting_argument(parser: Any, name: str, hint: Any, doc: str, default: Any) -> None:
    """Add the flag ``--name`` (underscores as dashes) for one setting of type ``hint``, as
    :func:`add_config_arguments` does for a field; ``default`` is only shown in the help (the
    parsed value stays ``None`` when the flag is not given). Types a flag cannot spell (nested
    configs) get no flag."""
    import argparse
    import typing

    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and type(None) in args:
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    help_text = f"{doc} (default: {default})".strip()
    flag = "--" + name.replace("_", "-")
    kwargs: dict[str, Any] = {"dest": name, "default": None, "help": help_text}
    if hint is bool:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
    elif origin is typing.Literal:
        parser.add_argument(flag, choices=list(args), **kwargs)
    elif hint in (int, float, str):
        parser.add_argument(flag, type=hint, **kwargs)
    elif origin in (tuple, list) and args and args[0] in (int, float, str):
        parser.add_argument(flag, type=args[0], nargs="*", **kwargs)


def given_fields(cls: type, args: Any, names: Iterable[str] | None = None) -> dict[str, Any]:
    """The fields of the dataclass ``cls`` (or the settings ``names``, when given) that a flag
    :func:`add_config_arguments` or :func:`add_setting_argument` added was given for (the others
    are left ``None`` by the parser); lists become tuples."""
    import dataclasses

    values = {}
    for name in names if names is not None else (f.name for f in dataclasses.fields(cls)):
        value = getattr(args, name, None)
        if value is not None:
            values[name] = tuple(value) if isinstance(value, list) else value
    return values


def config_from_args(cls: type, args: Any, **overrides: Any) -> Any:
    """Build ``cls`` from the flags :func:`add_config_arguments` added (only those given)."""
    return cls(**{**given_fields(cls, args), **overrides})
