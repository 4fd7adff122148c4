"""Grade a patch as the SWE-bench harness does, in a fresh sandbox.

1. A fresh sandbox with the repository at ``base_commit`` (no history after it; for a SWE-smith
   row, with its bug applied and its ``FAIL_TO_PASS`` test files removed, see
   :mod:`~skyrl_gym.envs.swe.swesmith`).
2. The model's patch, without its protected files (:func:`~skyrl_gym.envs.swe.patches.filter_patch`),
   is applied with ``git apply``, then ``git apply --reject``-free fallbacks: ``patch --fuzz``.
   A patch that does not apply is not resolved (``error="patch_failed"``).
   The model's changes to the test files the instance names (its ``test_patch`` and the files
   of its ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` ids) are dropped too: grading runs them as the
   instance wrote them.
3. The files of ``test_patch`` are restored to ``base_commit`` (removed when new), then the
   ``test_patch`` is applied.
4. The tests run under a deadline: the row's ``test_cmd``, or pytest (``-rA``) on every file
   that ``test_patch`` touches or a listed test id names (SWE-smith and SWE-Gym rows list
   ``PASS_TO_PASS`` tests from the whole suite, not only the patched files), with
   ``--continue-on-collection-errors`` so that one file that no longer imports does not hide the
   others. The log is parsed with the instance's log parser.
5. Resolved only when every ``FAIL_TO_PASS`` and every ``PASS_TO_PASS`` test passed (PASSED or
   XFAIL; a skipped test does not count as passing). A listed test absent from the log is
   ``ERROR`` when its file failed to collect (the patch broke an import: the model's fault)
   and otherwise a grading-setup error (``error="tests_missing"``, the names in ``missing``):
   the row or its test command is wrong, which no patch can fix, so the env raises
   :class:`GradingSetupError` and the episode is masked, never scored 0.
"""

from __future__ import annotations

import shlex
import time

from skyrl_gym.envs.swe._repo import RepoSource, resolve_repo
from skyrl_gym.envs.swe._runtime import Workspace, open_workspace
from skyrl_gym.envs.swe.log_parsers import get_log_parser
from skyrl_gym.envs.swe.patches import files_under_test, filter_patch, patch_files
from skyrl_gym.envs.swe.patches import test_file_of as _file_of
from skyrl_gym.envs.swe.swesmith import start_files, with_test_patch
from skyrl_gym.envs.swe.types import GradeReport, SWEEnvConfig, SWEInstance, TestResult
from skyrl_gym.errors import ConfigError, InfrastructureError, SandboxError

__all__ = [
    "grade_patch",
    "command_for_tests",
    "listed_test_files",
    "apply_patch",
    "GradingSetupError",
    "START_MARKER",
    "END_MARKER",
]

START_MARKER = ">>>>> skyrl-swe tests start"
END_MARKER = ">>>>> skyrl-swe tests end"
_APPLY = (
    ("git", "apply", "--verbose", "--whitespace=nowarn", "-"),
    ("patch", "--batch", "--forward", "--fuzz=5", "-p1"),
)


class GradingSetupError(InfrastructureError):
    """Grading could not judge a patch because of the instance, not the patch: a listed test
    never ran (the row names a test its test command does not run, or that does not exist).
    An infrastructure failure: the episode is masked. Fix the row's ``FAIL_TO_PASS`` /
    ``PASS_TO_PASS`` or its ``test_cmd``; ``skyrl swe check`` finds such rows."""


def listed_test_files(instance: SWEInstance) -> list[str]:
    """The test files grading runs: those ``test_patch`` leaves, then those the listed test ids
    name, in order, once each."""
    named = (_file_of(t) for t in (*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS))
    return list(dict.fromkeys([*files_under_test(instance.test_patch), *(f for f in named if f)]))


def command_for_tests(instance: SWEInstance, python: str) -> str:
    """The shell command that runs ``instance``'s tests (its ``test_cmd``, or pytest on
    :func:`listed_test_files`)."""
    if instance.test_cmd:
        return instance.test_cmd
    files = " ".join(shlex.quote(f) for f in listed_test_files(instance))
    return f"{python} -P -m pytest -rA --tb=short -p no:cacheprovider --continue-on-collection-errors {files}"


def apply_patch(ws: Workspace, patch: str) -> tuple[bool, str]:
    """Apply ``patch`` in the workspace's repository; (applied, output of the last try)."""
    out = ""
    for argv in _APPLY:
        result = ws.sandbox.exec(list(argv), stdin=patch, workdir=ws.root, timeout=120)
        out = (result.stdout + result.stderr)[-3000:]
        if result.ok:
            return True, out
        ws.sandbox.exec(["git", "checkout", "--", "."], workdir=ws.root, timeout=60)  # undo half-applied
        ws.sandbox.exec(["git", "clean", "-fdq"], workdir=ws.root, timeout=60)
    return False, out


def _restore_and_apply_tests(ws: Workspace, instance: SWEInstance, base_files: set[str]) -> None:
    if not instance.test_patch.strip():  # a SWE-smith row whose tests are all in the tree
        return
    files = patch_files(instance.test_patch)
    existing = [f for f in files if f in base_files]
    new = [f for f in files if f not in base_files]
    if existing:
        r = ws.sandbox.exec(["git", "checkout", "HEAD", "--", *existing], workdir=ws.root, timeout=60)
        if not r.ok:
            raise SandboxError(f"restoring test files of {instance.instance_id} failed: {r.stderr[-1000:]}")
    if new:
        ws.sandbox.exec(["rm", "-rf", "--", *new], workdir=ws.root, timeout=60)
    r = ws.sandbox.exec(
        ["git", "apply", "--verbose", "--whitespace=nowarn", "-"],
        stdin=instance.test_patch,
        workdir=ws.root,
        timeout=120,
    )
    if not r.ok:
        raise ConfigError(
            f"the test_patch of {instance.instance_id} does not apply at {instance.base_commit[:12]}: "
            f"{(r.stdout + r.stderr)[-1500:]}"
        )


def grade_patch(
    instance: SWEInstance,
    model_patch: str,
    *,
    config: SWEEnvConfig | None = None,
    source: RepoSource | None = None,
) -> GradeReport:
    """Grade ``model_patch`` for ``instance`` in a fresh sandbox; see the module docstring.

    A patch that does not apply or tests that fail give ``resolved=False``; a broken
    instance (its ``test_patch`` does not apply) raises :class:`ConfigError`, and a sandbox
    failure raises :class:`SandboxError` (never a silent 0)."""
    config = config or SWEEnvConfig()
    start = time.monotonic()
    source = source or RepoSource(resolve_repo(instance, config.repos_dir))
    instance = with_test_patch(instance, source)
    base_files = start_files(instance, source)
    parser = get_log_parser(instance.log_parser)
    filtered, dropped = filter_patch(
        model_patch or "",
        test_patch_files=[*patch_files(instance.test_patch), *listed_test_files(instance)],
        base_packages=source.packages(instance.base_commit),
    )

    def report(**kw: object) -> GradeReport:
        return GradeReport(
            instance_id=instance.instance_id,
            discarded_files=tuple(dropped),
            duration_s=time.monotonic() - start,
            **kw,  # type: ignore[arg-type]
        )

    with open_workspace(instance, source, config) as ws:
        if filtered.strip():
            applied, out = apply_patch(ws, filtered)
            if not applied:
                return report(resolved=False, patch_applied=False, error="patch_failed", log_tail=out)
        _restore_and_apply_tests(ws, instance, base_files)
        # stderr joins stdout inside the markers: unittest (and Django's runner) report on stderr
        cmd = f"echo '{START_MARKER}'\n{{\n{command_for_tests(instance, ws.python)}\n}} 2>&1\necho '{END_MARKER}'"
        result = ws.sandbox.exec(
            ["/bin/sh", "-c", cmd], env=ws.env, workdir=ws.root, timeout=config.test_timeout_s
        )
    log = result.stdout + "\n" + result.stderr
    # the first start and the last end marker: the code under test can print markers too
    body = log.split(START_MARKER, 1)[-1].rsplit(END_MARKER, 1)[0]
    statuses = parser(body)
    missing: list[str] = []

    def status(name: str) -> str:
        if name in statuses:
            return statuses[name]
        file = _file_of(name)
        if file is not None and statuses.get(file) == "ERROR":
            return "ERROR"  # its file did not collect: the patched code broke an import
        if not result.timed_out:
            missing.append(name)
        return "MISSING"

    tests = tuple(
        TestResult(name, kind, status(name))  # type: ignore[arg-type]
        for kind, names in (("FAIL_TO_PASS", instance.FAIL_TO_PASS), ("PASS_TO_PASS", instance.PASS_TO_PASS))
        for name in names
    )
    resolved = not result.timed_out and all(t.passed for t in tests)
    tail = "\n".join(body.strip().splitlines()[-40:])
    error = "tests_timed_out" if result.timed_out else "tests_missing" if missing else None
    return report(
        resolved=resolved,
        patch_applied=True,
        tests=tests,
        error=error,
        missing=tuple(missing),
        log_tail=tail,
        log=body[-(2 << 20) :],
    )
