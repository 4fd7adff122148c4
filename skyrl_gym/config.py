"""Reading env configs that are plain dicts or attribute-style objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ConfigView", "config_get"]

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
