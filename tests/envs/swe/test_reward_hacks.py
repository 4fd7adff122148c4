"""Reward hacks beyond a ``conftest.py`` and a planted test file (issue 20, item 5).

Each cheat is shown twice on the same patch: a naive grader (:func:`naive_resolved`: apply the
whole patch, put the instance's tests in place as SWE-bench does, run the suite the repository
configures, resolved when pytest exits 0) says *resolved*, and :func:`grade_patch` says *not
resolved*. So every test here fails if the cheat stops being a cheat (the naive verdict) or if
the grader stops refusing it. Local runtime: real git, real pytest.
"""

from __future__ import annotations

import dataclasses

import pytest

from skyrl_gym.envs.swe import SWEEnvConfig, SWEInstance, grade_patch
from skyrl_gym.envs.swe._repo import RepoSource, resolve_repo
from skyrl_gym.envs.swe._runtime import open_workspace
from skyrl_gym.envs.swe.grading import apply_patch
from skyrl_gym.envs.swe.patches import patch_files

LOCAL = SWEEnvConfig(sandbox="local")

#: Replaces the outcome of every test report with "passed" (pytest's own exit status follows).
FORCE_PASS = (
    "import _pytest.reports as r; r.TestReport.outcome = property(lambda s: 'passed', lambda s, v: None)"
)

XFAIL_PLUGIN = """\
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.xfail(reason="known", strict=False))
"""


def naive_resolved(instance: SWEInstance, patch: str, *, site_dir: bool = False) -> bool:
    """A grader without this project's guards: the whole patch, the instance's ``test_patch``
    over it (its files restored first, as SWE-bench does), then ``python -m pytest`` with the
    repository's own configuration; resolved when it exits 0. ``site_dir``: the repository is
    also a site directory (a grader that installs dependencies into it with ``pip --target .``),
    the one place where a ``.pth`` file of the patch takes effect."""
    source = RepoSource(resolve_repo(instance, LOCAL.repos_dir))
    with open_workspace(instance, source, LOCAL) as ws:
        applied, out = apply_patch(ws, patch)
        assert applied, out
        for path in patch_files(instance.test_patch):
            ws.sandbox.exec(["git", "checkout", "HEAD", "--", path], workdir=ws.root, timeout=60)
        r = ws.sandbox.exec(["git", "apply", "-"], stdin=instance.test_patch, workdir=ws.root, timeout=60)
        assert r.ok, r.stderr
        run = "import site, sys, pytest; site.addsitedir('.'); sys.exit(pytest.main([]))"
        cmd = [ws.python, "-c", run] if site_dir else [ws.python, "-m", "pytest"]
        result = ws.sandbox.exec(cmd, env=ws.env, workdir=ws.root, timeout=LOCAL.test_timeout_s)
    return result.exit_code == 0


def _roman_tests(base_file, inst: SWEInstance) -> tuple[str, ...]:
    text = base_file(inst, "tests/test_roman.py")
    return tuple(
        f"tests/test_roman.py::{line[4:].split('(')[0]}"
        for line in text.splitlines()
        if line.startswith("def test_")
    )


def _broken_roman(base_file, inst: SWEInstance) -> str:
    text = base_file(inst, "pocketlib/roman.py")
    assert "def to_roman" in text
    return (
        text
        + "\n\ndef to_roman(number):\n    if not 0 < number < 4000:\n        raise ValueError(number)\n    return ''\n"
    )


def _config_cheats() -> dict[str, dict[str, str | None]]:
    """Cheats that change how the tests run, without the fix (the FAIL_TO_PASS tests fail)."""
    failing = (
        "tests/test_intervals.py::test_merge_touching_intervals",
        "tests/test_intervals.py::test_merge_chain_of_touching",
    )
    deselect = " ".join(f"--deselect {t}" for t in failing)
    return {
        "pytest.ini deselects the failing tests": {
            "pytest.ini": f"[pytest]\ntestpaths = tests\naddopts = {deselect}\n"
        },
        "pyproject.toml filters them out with -k": {
            "pytest.ini": None,
            "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = ['tests']\naddopts = \"-k 'not touching'\"\n",
        },
        "setup.cfg marks every test xfail": {
            "pytest.ini": None,
            "pocketlib/_known.py": XFAIL_PLUGIN,
            "setup.cfg": "[tool:pytest]\ntestpaths = tests\naddopts = -p pocketlib._known\n",
        },
        "sitecustomize.py patches the runner": {"sitecustomize.py": FORCE_PASS + "\n"},
    }


@pytest.mark.parametrize("cheat", list(_config_cheats()))
def test_configuration_and_start_up_cheats(cheat, instances, make_patch):
    inst = instances[0]
    files = _config_cheats()[cheat]
    patch = make_patch(inst, files)
    assert naive_resolved(inst, patch), f"{cheat}: no longer fools a naive grader"
    report = grade_patch(inst, patch, config=LOCAL)
    assert report.patch_applied and not report.resolved and not report.setup_error, report.log_tail
    assert {t.status for t in report.tests if t.kind == "FAIL_TO_PASS"} == {"FAILED"}
    assert set(patch_files(patch)) - {"pocketlib/_known.py"} <= set(report.discarded_files)


def test_a_pth_file_that_patches_the_runner(instances, make_patch):
    inst = instances[0]
    patch = make_patch(inst, {"pocketlib-speedups.pth": FORCE_PASS + "\n"})
    assert not naive_resolved(inst, patch)  # a .pth file outside a site directory does nothing
    assert naive_resolved(inst, patch, site_dir=True)
    report = grade_patch(inst, patch, config=LOCAL)
    assert not report.resolved and report.discarded_files == ("pocketlib-speedups.pth",)


@pytest.mark.parametrize("cheat", ["deleted", "edited", "skipped"])
def test_listed_tests_that_the_patch_breaks_cannot_be_removed(cheat, instances, make_patch, base_file):
    """The fix, plus a change that breaks ``to_roman`` and hides the roman tests that a row
    lists in PASS_TO_PASS (SWE-smith and SWE-Gym rows list tests from the whole suite)."""
    inst = instances[0]
    roman = _roman_tests(base_file, inst)
    wide = dataclasses.replace(inst, PASS_TO_PASS=(*inst.PASS_TO_PASS, *roman))
    tests = base_file(inst, "tests/test_roman.py")
    hidden = {
        "deleted": None,
        "edited": tests.replace("assert ", "assert True or "),
        "skipped": "import pytest\n\npytestmark = pytest.mark.skip('flaky')\n\n" + tests,
    }[cheat]
    files = {"pocketlib/roman.py": _broken_roman(base_file, inst), "tests/test_roman.py": hidden}
    patch = make_patch(wide, files, apply_gold=True)
    assert naive_resolved(wide, patch), f"{cheat}: no longer fools a naive grader"
    report = grade_patch(wide, patch, config=LOCAL)
    assert report.patch_applied and not report.resolved and not report.setup_error, report.log_tail
    assert "tests/test_roman.py" in report.discarded_files
    statuses = {t.name: t.status for t in report.tests}
    assert statuses[roman[0]] == "FAILED" and all(statuses[t] == "PASSED" for t in inst.FAIL_TO_PASS)
    # without the breakage, the same fix resolves the wide row: the refusal is about the cheat
    assert grade_patch(wide, make_patch(wide, {}, apply_gold=True), config=LOCAL).resolved
