"""SWE-bench's own grading (the ``swebench`` package, 5.x) next to ours.

What comes from ``swebench`` (install the ``swe`` extra):

- **Per-repository log parsers.** A row of a repository SWE-bench grades with its own parser
  (Django's test runner, sympy's, astropy's, ... :data:`swebench_repos`) gets that parser: the
  log parser name ``swebench:<parser>`` (e.g. ``swebench:parse_log_django``), which
  :func:`~skyrl_gym.envs.swe.instances.instance_from_row` chooses for such a row when it names
  none, and which :func:`~skyrl_gym.envs.swe.log_parsers.get_log_parser` resolves here.
- **The report and the resolution status** (:func:`swebench_verdict`): ``swebench``'s
  ``get_eval_tests_report`` and ``get_resolution_status`` on a test log, so a grade can be
  checked against SWE-bench's verdict on the same log (``tests/envs/swe/test_swebench.py``
  does so for every bundled instance and the reward hacks).

What stays ours, and why: for pytest logs our ``pytest`` parser (it reads only the last short
test summary, so result lines that the code under test prints, or an ``atexit`` hook prints after
pytest's last line, do not count; ``swebench``'s ``parse_log_pytest`` reads every line and takes
the last, so such a forgery passes it), and the verdict rule, which is stricter in two places: a
SKIPPED or missing listed test is not a pass (SWE-bench counts a FAIL_TO_PASS test that is
neither passed nor failed as neither, so a row whose listed tests all skip is resolved there),
and a listed test that never ran is a grading-setup error (masked), not a silent failure. The
first is on purpose, for training: a patch can make tests skip without touching a test file
(``pytest.skip(..., allow_module_level=True)`` in a module they import), and under SWE-bench's
rule every such skip would be a free reward. Its cost: a row whose gold patch leaves a listed
test skipped (a missing optional dependency) grades unresolved here; ``skyrl swe check`` reports
it, gold not resolved, before any training. Everything around the parser (protected files, the test
command, offline images) is ours in both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skyrl_gym.envs.swe.types import SWEInstance
from skyrl_gym.errors import ConfigError, MissingDependencyError, require

__all__ = [
    "PREFIX",
    "SwebenchVerdict",
    "swebench_parser",
    "swebench_parser_name",
    "swebench_repos",
    "swebench_verdict",
]

#: Log parser names resolved through ``swebench``: ``swebench:<name in its PARSER_REGISTRY>``.
PREFIX = "swebench:"


def _parsers() -> tuple[dict[str, Callable[..., dict[str, str]]], dict[str, Callable[..., dict[str, str]]]]:
    require("swebench", "swe", "SWE-bench's log parsers")
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY

    return PARSER_REGISTRY, MAP_REPO_TO_PARSER_PY


def swebench_repos() -> list[str]:
    """The Python repositories SWE-bench grades with a parser of their own."""
    return sorted(_parsers()[1])


def swebench_parser_name(repo: str) -> str | None:
    """``swebench:<parser>`` for a repository SWE-bench knows, None for others (or without the
    package)."""
    try:
        _, by_repo = _parsers()
    except MissingDependencyError:
        return None
    fn = by_repo.get(repo)
    return None if fn is None else PREFIX + fn.__name__


def swebench_parser(name: str) -> Callable[[str], dict[str, str]]:
    """The ``swebench`` parser ``swebench:<parser>`` as a function of the log alone."""
    registry, _ = _parsers()
    key = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    fn = registry.get(key)
    if fn is None:
        raise ConfigError(f"swebench has no log parser {key!r}; it has {sorted(registry)}")

    def parse(log: str) -> dict[str, str]:
        return fn(log, None)  # the Python parsers do not read the test spec

    parse.__name__ = f"swebench_{key}"
    return parse


@dataclass(frozen=True)
class SwebenchVerdict:
    """SWE-bench's judgement of one test log."""

    resolved: bool
    """``get_resolution_status`` said ``RESOLVED_FULL``."""
    statuses: dict[str, str]
    """What its parser read: test id -> status."""
    report: dict[str, Any]
    """``get_eval_tests_report``: success and failure lists of FAIL_TO_PASS and PASS_TO_PASS."""


def swebench_verdict(instance: SWEInstance, log: str) -> SwebenchVerdict:
    """SWE-bench's verdict on ``log`` for ``instance``: its parser (the instance's
    ``swebench:`` parser, else ``parse_log_pytest``), report and resolution status."""
    require("swebench", "swe", "SWE-bench's grading")
    from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, ResolvedStatus
    from swebench.harness.grading import get_eval_tests_report, get_resolution_status

    name = instance.log_parser if instance.log_parser.startswith(PREFIX) else PREFIX + "parse_log_pytest"
    statuses = swebench_parser(name)(log)
    gold = {FAIL_TO_PASS: list(instance.FAIL_TO_PASS), PASS_TO_PASS: list(instance.PASS_TO_PASS)}
    report = get_eval_tests_report(statuses, gold)
    return SwebenchVerdict(get_resolution_status(report) == ResolvedStatus.FULL.value, statuses, report)
