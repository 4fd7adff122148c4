"""Test-log parsers: a test log in, ``{test id: status}`` out. A small registry.

``pytest`` reads the short summary that ``pytest -rA`` prints (``PASSED tests/t.py::test_x``,
``FAILED tests/t.py::test_y - AssertionError``) and, as a fallback, the verbose per-test lines
(``tests/t.py::test_x PASSED [ 50%]``). Add a parser for another runner with
:func:`register_log_parser`::

    @register_log_parser("my_runner")
    def parse_my_runner(log: str) -> dict[str, str]: ...
"""

from __future__ import annotations

import re
from collections.abc import Callable

from skyrl_gym.envs.swe.types import TestStatus
from skyrl_gym.errors import ConfigError, did_you_mean

__all__ = ["LogParser", "register_log_parser", "get_log_parser", "list_log_parsers", "parse_pytest_log"]

#: A parser: the test log's text to ``{test id: TestStatus value}``.
LogParser = Callable[[str], dict[str, str]]

_PARSERS: dict[str, LogParser] = {}


def register_log_parser(name: str) -> Callable[[LogParser], LogParser]:
    """Decorator registering a log parser under ``name`` (a name may be registered once)."""

    def deco(fn: LogParser) -> LogParser:
        if name in _PARSERS and _PARSERS[name] is not fn:
            raise ConfigError(f"a log parser named {name!r} is already registered")
        _PARSERS[name] = fn
        return fn

    return deco


def get_log_parser(name: str) -> LogParser:
    """The parser registered under ``name``."""
    try:
        return _PARSERS[name]
    except KeyError:
        raise ConfigError(
            f"unknown log parser {name!r}; registered: {sorted(_PARSERS)}." + did_you_mean(name, _PARSERS)
        ) from None


def list_log_parsers() -> list[str]:
    """Names of the registered parsers."""
    return sorted(_PARSERS)


_STATUSES = {s.value for s in TestStatus}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_VERBOSE = re.compile(r"^(\S+::\S.*?) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)(?:\s+\[\s*\d+%\])?\s*$")


@register_log_parser("pytest")
def parse_pytest_log(log: str) -> dict[str, str]:
    """Statuses from a ``pytest -rA`` log. Later lines win (the summary comes last)."""
    statuses: dict[str, str] = {}
    for raw in log.splitlines():
        line = _ANSI.sub("", raw).strip()
        if not line:
            continue
        word, _, rest = line.partition(" ")
        if word in _STATUSES and "::" in rest or (word == "ERROR" and rest):
            test = rest
            # ``FAILED t.py::x - message`` and ``SKIPPED [1] t.py:3: reason`` carry a suffix
            if " - " in test:
                test = test.split(" - ", 1)[0]
            test = test.strip()
            if word == "SKIPPED" and test.startswith("["):
                continue  # a skip reason line names a location, not a test id
            if test:
                statuses[test] = word
            continue
        m = _VERBOSE.match(line)
        if m:
            statuses.setdefault(m.group(1), m.group(2))
    return statuses
