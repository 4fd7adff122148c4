"""Helpers of the envs whose rows are generated from a seed (``kvchain``, ``bisect``): which split
an instance belongs to, and reading their ``env_config``."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

from skyrl_gym.config import config_get, config_items, without_env_class
from skyrl_gym.errors import ConfigError, did_you_mean

__all__ = ["SPLITS", "split_of", "check_split", "check_config_keys", "config_int", "config_float"]

SPLITS = ("train", "test")


def split_of(text: str) -> str:
    """The split an instance (named by ``text``: a key, a range and target) belongs to: ``train``
    when the CRC-32 of ``text`` is even, else ``test``. Generators keep only the instances of the
    split they make, so no held-out instance ever appears in training rows, whatever the seeds."""
    return SPLITS[zlib.crc32(text.encode("utf-8")) & 1]


def check_split(split: str) -> None:
    """Raise :class:`ConfigError` for a split other than ``train`` and ``test``."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; use 'train' or 'test'")


def check_config_keys(env_config: Any, known: Iterable[str], env_id: str) -> None:
    """Refuse an ``env_config`` key that ``env_id`` does not read (a typo would otherwise be
    ignored), naming the closest known key."""
    known = tuple(known)
    for key in without_env_class(config_items(env_config, f"{env_id} env_config"), env_id):
        if key not in known:
            raise ConfigError(
                f"unknown {env_id} env_config key {key!r}.{did_you_mean(key, known)} "
                f"Known keys: {', '.join(sorted(known))}"
            )


def config_float(env_config: Any, key: str, default: float, lo: float, hi: float) -> float:
    """``env_config[key]`` as a number in ``[lo, hi]``, or ``default`` when unset; anything else
    (a bool, text that is not a number, NaN) raises :class:`ConfigError`."""
    value = config_get(env_config, key, None)
    if value is None:
        return default
    number = float("nan")
    if not isinstance(value, bool) and isinstance(value, (int, float, str)):
        try:
            number = float(value)
        except ValueError:
            pass
    if not lo <= number <= hi:  # NaN fails too
        raise ConfigError(f"env_config {key!r} must be a number from {lo:g} to {hi:g}, got {value!r}")
    return number


def config_int(env_config: Any, key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    """``env_config[key]`` as an int in ``[lo, hi]`` (``hi`` None: no upper bound), or ``default``
    when unset; anything else raises :class:`ConfigError`."""
    value = config_get(env_config, key, None)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise ConfigError(f"env_config {key!r} must be a whole number, got {value!r}")
    number = int(value)
    if number < lo or (hi is not None and number > hi):
        where = f"at least {lo}" if hi is None else f"from {lo} to {hi}"
        raise ConfigError(f"env_config {key!r} must be {where}, got {number}")
    return number
