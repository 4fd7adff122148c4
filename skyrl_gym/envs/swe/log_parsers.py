"""Test-log parsers: a test log in, ``{test id: status}`` out. A small registry.

``pytest`` reads the short summary that ``pytest -rA`` prints (``PASSED tests/t.py::test_x``,
``FAILED tests/t.py::test_y - AssertionError``), and only that section when it is there (the
code under test can print lines that look like results); without one, every status line and the
verbose per-test lines (``tests/t.py::test_x PASSED [ 50%]``). ``swebench:<parser>`` names one of
SWE-bench's own parsers (rows of the repositories SWE-bench knows get theirs). Add a parser for
another runner with
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
    """The parser registered under ``name``; ``swebench:<parser>`` is SWE-bench's own parser of
    that name (the ``swe`` extra, :mod:`skyrl_gym.envs.swe.swebench_grading`)."""
    if name.startswith("swebench:"):
        from skyrl_gym.envs.swe.swebench_grading import swebench_parser

        return swebench_parser(name)
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


_SUMMARY = re.compile(r"^=+ short test summary info =+$")
_FINAL = re.compile(r"^=+ .*\bin [0-9.]+s\b.* =+$")


def _summary_region(lines: list[str]) -> list[str] | None:
    """The lines of the last short test summary, up to pytest's final line (None: no summary).

    Status lines elsewhere (printed by the code under test into captured output, or after the
    run ended) are not read, so they cannot pose as results."""
    start = max((i for i, line in enumerate(lines) if _SUMMARY.match(line)), default=None)
    if start is None:
        return None
    region = []
    for line in lines[start + 1 :]:
        if _FINAL.match(line):
            break
        region.append(line)
    return region


@register_log_parser("pytest")
def parse_pytest_log(log: str) -> dict[str, str]:
    """Statuses from a ``pytest -rA`` log: its short test summary when there is one, else every
    status line and verbose per-test line (later lines win)."""
    lines = [_ANSI.sub("", raw).strip() for raw in log.splitlines()]
    region = _summary_region(lines)
    statuses: dict[str, str] = {}
    for line in region if region is not None else lines:
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
