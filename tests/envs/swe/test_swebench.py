"""Our grader against SWE-bench's own (the ``swebench`` package) on the same test logs.

They must agree on every bundled instance (gold and empty patches) and on the reward hacks our
filter stops; the one listed difference, where ours is stricter, is result lines forged by the
code under test. Local runtime: real git, real pytest."""

from __future__ import annotations

import pytest

pytest.importorskip("swebench", reason="the swebench package is not installed (the `swe` extra)")

from skyrl_gym.envs.swe import SWEEnvConfig, grade_patch  # noqa: E402
from skyrl_gym.envs.swe.instances import instance_from_row  # noqa: E402
from skyrl_gym.envs.swe.log_parsers import get_log_parser  # noqa: E402
from skyrl_gym.envs.swe.swebench_grading import swebench_repos, swebench_verdict  # noqa: E402
from skyrl_gym.errors import ConfigError  # noqa: E402
from tests.envs.swe.conftest import FLIP_HOOK  # noqa: E402
from tests.envs.swe.test_grading import FORGER  # noqa: E402

LOCAL = SWEEnvConfig(sandbox="local")


def _agree(inst, report) -> None:
    theirs = swebench_verdict(inst, report.log)
    assert theirs.resolved == report.resolved, (inst.instance_id, theirs.report, report.tests)
    for t in report.tests:
        success = theirs.report[t.kind]["success"]
        assert (t.name in success) == t.passed, (inst.instance_id, t, theirs.statuses.get(t.name))


def test_both_graders_agree_on_every_bundled_instance(instances):
    for inst in instances:
        gold = grade_patch(inst, inst.patch, config=LOCAL)
        empty = grade_patch(inst, "", config=LOCAL)
        assert gold.resolved and not empty.resolved and gold.log and empty.log
        _agree(inst, gold)
        _agree(inst, empty)


@pytest.mark.parametrize(
    "files",
    [
        {"conftest.py": FLIP_HOOK},
        {"pytest.ini": "[pytest]\ntestpaths = tests\naddopts = -k 'not touching'\n"},
        {
            "sitecustomize.py": "import _pytest.reports as r\nr.TestReport.outcome = property(lambda s: 'passed', lambda s, v: None)\n"
        },
    ],
    ids=["conftest", "deselect", "sitecustomize"],
)
def test_both_graders_agree_on_the_logs_of_filtered_hacks(files, instances, make_patch):
    inst = instances[0]
    report = grade_patch(inst, make_patch(inst, files), config=LOCAL)
    assert not report.resolved and report.discarded_files
    _agree(inst, report)


def test_forged_result_lines_fool_swebench_s_parser_not_ours(instances, make_patch, base_file):
    """The listed difference: code under test prints ``PASSED ...`` lines (and an ``atexit`` hook
    prints them after pytest's summary); ``parse_log_pytest`` reads every line, ours only the
    last short test summary."""
    inst = instances[0]
    text = base_file(inst, "pocketlib/intervals.py")
    text = text[: text.index("def total_length")] + FORGER.lstrip()
    report = grade_patch(inst, make_patch(inst, {"pocketlib/intervals.py": text}), config=LOCAL)
    assert report.patch_applied and not report.resolved
    assert swebench_verdict(inst, report.log).resolved  # SWE-bench's parser is fooled


DJANGO_LOG = """\
test_add (utils_tests.test_math.MathTests) ... ok
test_sub (utils_tests.test_math.MathTests) ... FAIL
test_mul (utils_tests.test_math.MathTests) ... skipped 'no reason'
"""


def test_rows_of_repositories_swebench_knows_get_its_parser(instances):
    assert "django/django" in swebench_repos() and "sympy/sympy" in swebench_repos()
    row = {**instances[0].to_row(), "repo": "django/django"}
    row.pop("log_parser", None)
    django = instance_from_row(row)
    assert django.log_parser == "swebench:parse_log_django"
    statuses = get_log_parser(django.log_parser)(DJANGO_LOG)
    assert statuses["test_add (utils_tests.test_math.MathTests)"] == "PASSED"
    assert statuses["test_sub (utils_tests.test_math.MathTests)"] == "FAILED"
    assert instance_from_row(instances[0].to_row()).log_parser == "pytest"  # ours where swebench has none
    explicit = instance_from_row({**row, "log_parser": "pytest"})
    assert explicit.log_parser == "pytest"  # a row's own choice wins
    with pytest.raises(ConfigError, match="swebench has no log parser 'parse_log_nope'"):
        get_log_parser("swebench:parse_log_nope")
