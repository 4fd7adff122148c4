"""Grade a patch as the SWE-bench harness does, in a fresh sandbox.

1. A fresh sandbox with the repository at ``base_commit`` (no history after it).
2. The model's patch, without its protected files (:func:`~skyrl_gym.envs.swe.patches.filter_patch`),
   is applied with ``git apply``, then ``git apply --reject``-free fallbacks: ``patch --fuzz``.
   A patch that does not apply is not resolved (``error="patch_failed"``).
3. The files of ``test_patch`` are restored to ``base_commit`` (removed when new), then the
   ``test_patch`` is applied.
4. The tests of ``test_patch`` run (pytest ``-rA`` by default) under a deadline; the log is
   parsed with the instance's log parser.
5. Resolved only when every ``FAIL_TO_PASS`` and every ``PASS_TO_PASS`` test passed (PASSED or
   XFAIL; a skipped or missing test does not count as passing).
"""

from __future__ import annotations

import shlex
import time

from skyrl_gym.envs.swe._repo import RepoSource, resolve_repo
from skyrl_gym.envs.swe._runtime import Workspace, open_workspace
from skyrl_gym.envs.swe.log_parsers import get_log_parser
from skyrl_gym.envs.swe.patches import files_under_test, filter_patch, patch_files
from skyrl_gym.envs.swe.types import GradeReport, SWEEnvConfig, SWEInstance, TestResult
from skyrl_gym.errors import ConfigError, SandboxError

__all__ = ["grade_patch", "command_for_tests", "apply_patch", "START_MARKER", "END_MARKER"]

START_MARKER = ">>>>> skyrl-swe tests start"
END_MARKER = ">>>>> skyrl-swe tests end"
_APPLY = (
    ("git", "apply", "--verbose", "--whitespace=nowarn", "-"),
    ("patch", "--batch", "--forward", "--fuzz=5", "-p1"),
)


def command_for_tests(instance: SWEInstance, python: str) -> str:
    """The shell command that runs ``instance``'s tests."""
    if instance.test_cmd:
        return instance.test_cmd
    files = " ".join(shlex.quote(f) for f in files_under_test(instance.test_patch))
    return f"{python} -P -m pytest -rA --tb=short -p no:cacheprovider {files}"


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
    base_files = set(source.files(instance.base_commit))
    parser = get_log_parser(instance.log_parser)
    filtered, dropped = filter_patch(
        model_patch or "",
        test_patch_files=patch_files(instance.test_patch),
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
        cmd = f"echo '{START_MARKER}'; {command_for_tests(instance, ws.python)}; echo '{END_MARKER}'"
        result = ws.sandbox.exec(
            ["/bin/sh", "-c", cmd], env=ws.env, workdir=ws.root, timeout=config.test_timeout_s
        )
    log = result.stdout + "\n" + result.stderr
    # the first start and the last end marker: the code under test can print markers too
    body = log.split(START_MARKER, 1)[-1].rsplit(END_MARKER, 1)[0]
    statuses = parser(body)
    tests = tuple(
        TestResult(name, kind, statuses.get(name, "MISSING"))  # type: ignore[arg-type]
        for kind, names in (("FAIL_TO_PASS", instance.FAIL_TO_PASS), ("PASS_TO_PASS", instance.PASS_TO_PASS))
        for name in names
    )
    resolved = not result.timed_out and all(t.passed for t in tests)
    tail = "\n".join(body.strip().splitlines()[-40:])
    return report(
        resolved=resolved,
        patch_applied=True,
        tests=tests,
        error="tests_timed_out" if result.timed_out else None,
        log_tail=tail,
    )
