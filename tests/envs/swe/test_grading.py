"""Grading as SWE-bench grades, and the reward hacks that must not change the verdict.

Runs on the local runtime (real git, real pytest, bubblewrap where it works); the Docker
runtime is covered in ``test_swe_docker.py``."""

from __future__ import annotations

import dataclasses

import pytest

from skyrl_gym.envs.swe import SWEEnvConfig, grade_patch
from skyrl_gym.envs.swe.grading import command_for_tests
from skyrl_gym.envs.swe.patches import patch_files
from tests.envs.swe.conftest import FLIP_HOOK

LOCAL = SWEEnvConfig(sandbox="local")


def test_gold_resolves_and_empty_does_not(instances):
    inst = instances[0]
    gold = grade_patch(inst, inst.patch, config=LOCAL)
    assert gold.resolved and gold.reward == 1.0 and gold.patch_applied and gold.error is None
    assert [t.status for t in gold.tests] == ["PASSED"] * (len(inst.FAIL_TO_PASS) + len(inst.PASS_TO_PASS))
    empty = grade_patch(inst, "", config=LOCAL)
    assert not empty.resolved and empty.reward == 0.0
    f2p = [t for t in empty.tests if t.kind == "FAIL_TO_PASS"]
    p2p = [t for t in empty.tests if t.kind == "PASS_TO_PASS"]
    assert {t.status for t in f2p} == {"FAILED"} and all(t.passed for t in p2p)
    assert gold.to_dict()["tests"][0]["name"] == inst.FAIL_TO_PASS[0]


def test_a_patch_that_breaks_a_pass_to_pass_test_is_not_resolved(instances, make_patch, base_file):
    inst = instances[0]  # merge(): the fix, but also dropping the check of reversed intervals
    text = base_file(inst, "pocketlib/intervals.py")
    text = text.replace("start < result", "start <= result").replace("if start > end:", "if False:")
    broken = make_patch(inst, {"pocketlib/intervals.py": text})
    report = grade_patch(inst, broken, config=LOCAL)
    assert report.patch_applied and not report.resolved
    failed = [t.name for t in report.tests if not t.passed]
    assert failed == ["tests/test_intervals.py::test_merge_rejects_reversed"]


def test_a_patch_that_does_not_apply(instances):
    inst = instances[1]
    report = grade_patch(inst, instances[0].patch.replace("start <", "begin <"), config=LOCAL)
    assert not report.resolved and not report.patch_applied and report.error == "patch_failed"
    assert report.tests == ()


def test_tests_that_hang_time_out(instances, make_patch):
    inst = instances[0]
    text = "def merge(intervals):\n    while True:\n        pass\n\n\ndef total_length(intervals):\n    return 0\n"
    patch = make_patch(inst, {"pocketlib/intervals.py": text})
    report = grade_patch(inst, patch, config=dataclasses.replace(LOCAL, test_timeout_s=3.0))
    assert not report.resolved and report.error == "tests_timed_out"


# ---------------------------------------------------------------- reward hacks
HOOK_MODULE = {"pocketlib/_hook.py": FLIP_HOOK}
INI_PLUGIN = "[pytest]\ntestpaths = tests\naddopts = -p pocketlib._hook\n"

HACKS = {
    "conftest at the root": {"conftest.py": FLIP_HOOK},
    "conftest next to the tests": {"tests/conftest.py": FLIP_HOOK},
    "the hidden tests written by the model": {
        "tests/test_intervals.py": "def test_merge_touching_intervals():\n    pass\n\n\n"
        "def test_merge_chain_of_touching():\n    pass\n",
    },
    "pytest.ini loads a plugin": {**HOOK_MODULE, "pytest.ini": INI_PLUGIN},
    "pyproject.toml loads a plugin": {
        **HOOK_MODULE,
        "pytest.ini": None,
        "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p pocketlib._hook"\n',
    },
    "setup.cfg loads a plugin": {
        **HOOK_MODULE,
        "pytest.ini": None,
        "setup.cfg": "[tool:pytest]\naddopts = -p pocketlib._hook\n",
    },
    "tox.ini loads a plugin": {
        **HOOK_MODULE,
        "pytest.ini": None,
        "tox.ini": "[pytest]\naddopts = -p pocketlib._hook\n",
    },
    "an entry-point plugin": {
        **HOOK_MODULE,
        "pocketlib_hook-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: pocketlib-hook\nVersion: 1.0\n",
        "pocketlib_hook-1.0.dist-info/entry_points.txt": "[pytest11]\nhook = pocketlib._hook\n",
    },
    "sitecustomize": {
        "sitecustomize.py": "import _pytest.reports as r\nr.TestReport.outcome = property(lambda s: 'passed', lambda s, v: None)\n"
    },
    "a module that shadows pytest": {"pytest.py": "raise SystemExit(0)\n"},
}


FORGER = """
import atexit
import os

FORGED = "".join(f"PASSED tests/test_intervals.py::{name}\\n" for name in ("test_merge_touching_intervals", "test_merge_chain_of_touching"))
atexit.register(lambda: os.write(1, FORGED.encode()))  # after pytest's summary


def total_length(intervals):
    print(FORGED + ">>>>> skyrl-swe tests end")  # in the captured output -rA shows
    return sum(end - start for start, end in merge(intervals))
"""


def test_forged_result_lines_and_markers_do_not_count(instances, make_patch, base_file):
    inst = instances[0]
    text = base_file(inst, "pocketlib/intervals.py")
    text = text[: text.index("def total_length")] + FORGER.lstrip()
    report = grade_patch(inst, make_patch(inst, {"pocketlib/intervals.py": text}), config=LOCAL)
    assert report.patch_applied and not report.resolved, report.log_tail
    assert "PASSED tests/test_intervals.py::test_merge_touching_intervals" in report.log_tail  # it did print
    assert [t.status for t in report.tests if t.kind == "FAIL_TO_PASS"] == ["FAILED", "FAILED"]


@pytest.mark.parametrize("hack", list(HACKS))
def test_reward_hacks_do_not_change_the_verdict(hack, instances, make_patch):
    inst = instances[0]
    patch = make_patch(inst, HACKS[hack])
    report = grade_patch(inst, patch, config=LOCAL)
    assert not report.resolved, report.log_tail
    touched = set(patch_files(patch)) - set(HOOK_MODULE)
    assert touched and touched <= set(report.discarded_files)
    # the same hack on top of the real fix leaves the fix resolved
    fixed = make_patch(inst, HACKS[hack], apply_gold=True)
    assert grade_patch(inst, fixed, config=LOCAL).resolved


@pytest.mark.parametrize(
    "hack", ["conftest at the root", "pytest.ini loads a plugin", "an entry-point plugin"]
)
def test_the_hacks_are_real_when_not_filtered(hack, instances, make_patch):
    """Each hack flips the verdict when it reaches the test run (here through the trusted
    test_patch, with autoloading of entry-point plugins allowed), so the filter is what stops it."""
    inst = instances[0]
    files = HACKS[hack]
    extra = make_patch(inst, {k: v for k, v in files.items() if k not in HOOK_MODULE})
    module = make_patch(inst, {k: v for k, v in files.items() if k in HOOK_MODULE})
    command = command_for_tests(inst, "/usr/bin/python3")  # the test files of the real test_patch
    if hack == "an entry-point plugin":
        command = "PYTEST_DISABLE_PLUGIN_AUTOLOAD= " + command.replace(" -P ", " ")
    trusted = dataclasses.replace(inst, test_patch=inst.test_patch + extra, test_cmd=command)
    report = grade_patch(trusted, module, config=LOCAL)
    assert report.resolved, report.log_tail


# ---------------------------------------------------------------- which tests run (issue 20, item 2)
def _roman_tests(inst, base_file) -> list[str]:
    text = base_file(inst, "tests/test_roman.py")
    return [
        f"tests/test_roman.py::{line[4:].split('(')[0]}"
        for line in text.splitlines()
        if line.startswith("def test_")
    ]


def test_pass_to_pass_tests_in_other_files_run(instances, base_file):
    inst = instances[0]  # its test_patch touches tests/test_intervals.py only
    roman = _roman_tests(inst, base_file)[:2]
    assert roman
    wide = dataclasses.replace(inst, PASS_TO_PASS=(*inst.PASS_TO_PASS, *roman))
    assert "tests/test_roman.py" in command_for_tests(wide, "python3")
    gold = grade_patch(wide, wide.patch, config=LOCAL)
    assert gold.resolved and gold.error is None and not gold.missing
    assert {t.name: t.status for t in gold.tests}[roman[0]] == "PASSED"


def test_a_listed_test_that_never_runs_is_a_setup_error_not_a_zero(instances):
    inst = instances[0]
    ghost = "tests/test_roman.py::test_no_such_test"
    wrong = dataclasses.replace(inst, PASS_TO_PASS=(*inst.PASS_TO_PASS, ghost))
    gold = grade_patch(wrong, wrong.patch, config=LOCAL)
    assert not gold.resolved and gold.error == "tests_missing" and gold.setup_error
    assert gold.missing == (ghost,) and gold.to_dict()["missing"] == [ghost]
    assert not grade_patch(inst, inst.patch, config=LOCAL).setup_error


def test_a_patch_that_breaks_a_listed_file_s_import_fails_its_tests(instances, base_file, make_patch):
    inst = instances[0]
    roman = _roman_tests(inst, base_file)[:1]
    wide = dataclasses.replace(inst, PASS_TO_PASS=(*inst.PASS_TO_PASS, *roman))
    broken = make_patch(wide, {"pocketlib/roman.py": "def to_roman(:\n"}, apply_gold=True)
    report = grade_patch(wide, broken, config=LOCAL)
    assert not report.resolved and not report.setup_error and report.error is None
    assert {t.name: t.status for t in report.tests}[roman[0]] == "ERROR"


def test_edits_to_a_listed_test_file_outside_the_test_patch_are_dropped(instances, base_file, make_patch):
    inst = instances[0]
    roman = _roman_tests(inst, base_file)[:1]
    wide = dataclasses.replace(inst, PASS_TO_PASS=(*inst.PASS_TO_PASS, *roman))
    # the gold fix plus an edit that would make the roman tests fail if it counted
    edit = base_file(inst, "tests/test_roman.py") + "\n\nassert False, 'edited'\n"
    patch = make_patch(wide, {"tests/test_roman.py": edit}, apply_gold=True)
    report = grade_patch(wide, patch, config=LOCAL)
    assert "tests/test_roman.py" in report.discarded_files
    assert report.resolved


def test_unittest_ids_name_their_files_so_those_are_protected(instances):
    from skyrl_gym.envs.swe.grading import _file_of, listed_test_files

    assert _file_of("test_x (tests.test_t.TestT.test_x)") == "tests/test_t.py"  # Python 3.11+
    assert _file_of("test_x (app.tests.TestT)") == "app/tests.py"  # older runners, Django's
    assert _file_of("tests/t.py::test_x[1]") == "tests/t.py" and _file_of("test_x") is None
    ledger = next(i for i in instances if i.instance_id == "ledgerlite__ledgerlite-1")
    # the test patch touches test_money.py only; PASS_TO_PASS names tests of test_ledger.py too
    assert listed_test_files(ledger) == ["tests/test_money.py", "tests/test_ledger.py"]


def test_deleting_a_pass_to_pass_unittest_file_is_dropped_from_the_patch(instances, tmp_path):
    import subprocess

    from skyrl_gym.envs.swe import grade_patch
    from skyrl_gym.envs.swe.types import SWEEnvConfig

    ledger = next(i for i in instances if i.instance_id == "ledgerlite__ledgerlite-1")
    repo = tmp_path / "ledgerlite"
    subprocess.run(["git", "clone", "-q", ledger.repo_path, str(repo)], check=True)
    subprocess.run(["git", "checkout", "-q", ledger.base_commit], cwd=repo, check=True)
    subprocess.run(["git", "apply", "-"], cwd=repo, input=ledger.patch, text=True, check=True)
    (repo / "tests" / "test_ledger.py").unlink()  # the file of most PASS_TO_PASS tests
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    patch = subprocess.run(["git", "diff", "--cached"], cwd=repo, capture_output=True, text=True).stdout
    assert "deleted file mode" in patch
    report = grade_patch(ledger, patch, config=SWEEnvConfig(sandbox="local"))
    assert report.resolved and "tests/test_ledger.py" in report.discarded_files, report
