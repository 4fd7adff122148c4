"""The pytest log parser and the parser registry."""

from __future__ import annotations

import pytest

from skyrl_gym.envs.swe import get_log_parser, list_log_parsers, register_log_parser
from skyrl_gym.errors import ConfigError

LOG = """\
============================= test session starts ==============================
collected 5 items

tests/test_a.py .F.sx                                                    [100%]

=================================== FAILURES ===================================
___________________________________ test_two ___________________________________
E   assert 1 == 2
==================================== PASSES ====================================
=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::test_param[a - b]
SKIPPED [1] tests/test_a.py:12: not today
XFAIL tests/test_a.py::test_four - known bug
FAILED tests/test_a.py::test_two - assert 1 == 2
ERROR tests/test_b.py - ImportError: cannot import name 'x'
\x1b[31mFAILED\x1b[0m tests/test_a.py::test_colour
=================== 1 failed, 2 passed, 1 skipped in 0.05s ====================
"""


def test_pytest_summary_lines():
    statuses = get_log_parser("pytest")(LOG)
    assert statuses["tests/test_a.py::test_one"] == "PASSED"
    assert statuses["tests/test_a.py::test_two"] == "FAILED"
    assert statuses["tests/test_a.py::test_four"] == "XFAIL"
    assert statuses["tests/test_b.py"] == "ERROR"
    assert statuses["tests/test_a.py::test_colour"] == "FAILED"
    assert statuses["tests/test_a.py::test_param[a"] == "PASSED"  # ids with " - " are cut, as SWE-bench does
    assert not any(k.startswith("[") for k in statuses)


def test_verbose_lines_are_a_fallback():
    log = "tests/t.py::test_x PASSED                      [ 50%]\ntests/t.py::test_y FAILED [100%]\n"
    assert get_log_parser("pytest")(log) == {"tests/t.py::test_x": "PASSED", "tests/t.py::test_y": "FAILED"}


def test_registry():
    assert "pytest" in list_log_parsers()

    @register_log_parser("tap-for-test")
    def tap(log: str) -> dict[str, str]:
        return {line[7:]: "PASSED" for line in log.splitlines() if line.startswith("ok 1 - ")}

    assert get_log_parser("tap-for-test")("ok 1 - a\n") == {"a": "PASSED"}
    with pytest.raises(ConfigError, match="already registered"):
        register_log_parser("tap-for-test")(lambda log: {})
    with pytest.raises(ConfigError, match="Did you mean 'pytest'"):
        get_log_parser("pytset")


def test_only_the_summary_counts_when_there_is_one():
    forged = "PASSED tests/test_a.py::test_two\n"
    log = forged + LOG + forged + "PASSED tests/test_a.py::test_late\n"
    statuses = get_log_parser("pytest")(log)
    assert statuses["tests/test_a.py::test_two"] == "FAILED"
    assert "tests/test_a.py::test_late" not in statuses
