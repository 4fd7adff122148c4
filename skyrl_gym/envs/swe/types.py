"""Data types of the SWE env: task instances, test statuses, grading reports, the env config.

An instance follows the SWE-bench schema (``instance_id``, ``repo``, ``base_commit``,
``problem_statement``, ``patch``, ``test_patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``,
``version``, ``environment_setup_commit``) plus optional fields that say where the repository
is and how to set its environment up offline (``repo_path``, ``image``, ``environment_setup``,
``install``, ``test_cmd``, ``log_parser``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from skyrl_gym.errors import ConfigError
from skyrl_gym.sandbox.types import SandboxKind

__all__ = [
    "SWEInstance",
    "TestStatus",
    "TestResult",
    "GradeReport",
    "SWEEnvConfig",
    "SandboxKind",
    "DEFAULT_BASE_IMAGE",
]

#: The image env images are built FROM (``skyrl sandbox build-images`` makes it offline).
DEFAULT_BASE_IMAGE = "skyrl-sandbox/python:latest"


class TestStatus(StrEnum):
    """The status of one test in a test log (SWE-bench's ``TestStatus``)."""

    __test__ = False  # not a pytest test class

    PASSED = "PASSED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"
    XPASS = "XPASS"

    @property
    def ok(self) -> bool:
        """True for statuses that count as passing (PASSED, XFAIL), as SWE-bench counts them."""
        return self in (TestStatus.PASSED, TestStatus.XFAIL)


@dataclass(frozen=True)
class SWEInstance:
    """One task instance: a repository at a commit, an issue, the fix and the tests that judge it."""

    instance_id: str
    """Unique id, e.g. ``pocketlib__pocketlib-3`` (SWE-bench style ``owner__name-N``)."""
    repo: str
    """``owner/name`` of the repository."""
    base_commit: str
    """The commit the agent starts from (full or abbreviated hash, or a ref)."""
    problem_statement: str
    """The issue text the agent sees."""
    patch: str
    """The gold patch (a unified diff that fixes the issue, tests excluded)."""
    test_patch: str
    """The diff that adds the tests judging the fix; never shown to the agent."""
    FAIL_TO_PASS: tuple[str, ...]
    """Tests that fail before the fix and must pass after it."""
    PASS_TO_PASS: tuple[str, ...]
    """Tests that pass before the fix and must still pass after it."""
    version: str = ""
    """The repository's version at ``base_commit`` (keys the environment in SWE-bench)."""
    environment_setup_commit: str = ""
    """SWE-bench's commit whose dependencies the environment installs (kept for reference)."""
    hints_text: str = ""
    """Hints from the issue thread (not shown to the agent by default)."""
    repo_path: str | None = None
    """A directory or ``.bundle`` file holding the repository (absolute, after loading)."""
    image: str = DEFAULT_BASE_IMAGE
    """The base image the env image is built FROM."""
    environment_setup: tuple[str, ...] = ()
    """Shell commands baked into the env image (offline: install from local files only)."""
    install: tuple[str, ...] = ()
    """Shell commands run in ``/testbed`` after the repository is placed (e.g. a build step)."""
    test_cmd: str = ""
    """The test command; empty: pytest with ``-rA`` on the test files of ``test_patch``."""
    log_parser: str = "pytest"
    """Name of the log parser in :mod:`skyrl_gym.envs.swe.log_parsers`."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Any other fields of the row (``created_at``...), kept as they were."""
    bug_patch: str = ""
    """SWE-smith rows only: the row's ``patch``, the diff that puts the bug in at
    ``base_commit``. The agent starts from ``base_commit`` with it applied and the files of the
    ``FAIL_TO_PASS`` tests removed; ``patch`` is its reverse and ``test_patch`` is made from the
    repository (see :mod:`skyrl_gym.envs.swe.swesmith`)."""

    def __post_init__(self) -> None:
        if not self.instance_id:
            raise ConfigError("an SWE instance needs a non-empty instance_id")
        object.__setattr__(self, "FAIL_TO_PASS", tuple(self.FAIL_TO_PASS))
        object.__setattr__(self, "PASS_TO_PASS", tuple(self.PASS_TO_PASS))
        object.__setattr__(self, "environment_setup", tuple(self.environment_setup))
        object.__setattr__(self, "install", tuple(self.install))

    def to_row(self) -> dict[str, Any]:
        """The instance as a row (lists as JSON strings, as SWE-bench publishes them; a
        SWE-smith instance in SWE-smith's shape, lists as lists)."""
        import json

        row: dict[str, Any] = dict(self.extra)
        if self.bug_patch:  # SWE-smith's shape: its patch is the bug, its tests are the repo's
            row.update(
                instance_id=self.instance_id,
                repo=self.repo,
                base_commit=self.base_commit,
                problem_statement=self.problem_statement,
                patch=self.bug_patch,
                FAIL_TO_PASS=list(self.FAIL_TO_PASS),
                PASS_TO_PASS=list(self.PASS_TO_PASS),
            )
            self._our_fields(row)
            return row
        row.update(
            instance_id=self.instance_id,
            repo=self.repo,
            base_commit=self.base_commit,
            problem_statement=self.problem_statement,
            patch=self.patch,
            test_patch=self.test_patch,
            FAIL_TO_PASS=json.dumps(list(self.FAIL_TO_PASS)),
            PASS_TO_PASS=json.dumps(list(self.PASS_TO_PASS)),
            version=self.version,
            environment_setup_commit=self.environment_setup_commit,
            hints_text=self.hints_text,
        )
        self._our_fields(row)
        return row

    def _our_fields(self, row: dict[str, Any]) -> None:
        """Write the fields this project adds to the SWE-bench schema (where not defaults)."""
        if self.repo_path is not None:
            row["repo_path"] = self.repo_path
        if self.image != DEFAULT_BASE_IMAGE:
            row["image"] = self.image
        for name in ("environment_setup", "install"):
            if getattr(self, name):
                row[name] = list(getattr(self, name))
        if self.test_cmd:
            row["test_cmd"] = self.test_cmd
        if self.log_parser != "pytest":
            row["log_parser"] = self.log_parser


@dataclass(frozen=True)
class TestResult:
    """The outcome of one graded test."""

    __test__ = False

    name: str
    """The test id as in ``FAIL_TO_PASS``/``PASS_TO_PASS``."""
    kind: Literal["FAIL_TO_PASS", "PASS_TO_PASS"]
    """Which list it came from."""
    status: str
    """The status in the log (a :class:`TestStatus` value), or ``MISSING`` when not in it."""

    @property
    def passed(self) -> bool:
        """True when the test counts as passing."""
        return self.status in (TestStatus.PASSED.value, TestStatus.XFAIL.value)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "kind": self.kind, "status": self.status, "passed": self.passed}


@dataclass(frozen=True)
class GradeReport:
    """What grading one patch found. ``resolved`` only when every F2P and P2P test passed."""

    instance_id: str
    """The instance graded."""
    resolved: bool
    """True when the patch applied and every FAIL_TO_PASS and PASS_TO_PASS test passed."""
    patch_applied: bool
    """False when the model's patch could not be applied (then nothing ran)."""
    tests: tuple[TestResult, ...] = ()
    """Per-test results, FAIL_TO_PASS first."""
    discarded_files: tuple[str, ...] = ()
    """Files the model's patch touched that grading ignores (tests, conftest, pytest config...)."""
    error: str | None = None
    """Why grading could not judge the patch: ``patch_failed`` (the model's fault),
    ``tests_timed_out``, ``tests_missing`` (listed tests that never ran and whose file did not
    fail to collect: the instance's fault, see :attr:`setup_error`); ``None`` when every listed
    test ran."""
    missing: tuple[str, ...] = ()
    """The listed tests absent from the log (with ``error="tests_missing"``)."""
    log_tail: str = ""
    """The last lines of the test log (or of the failed patch command)."""
    log: str = field(default="", repr=False)
    """The test run's log between the markers (at most 2 MiB, its end kept); not in
    :meth:`to_dict`. What :func:`~skyrl_gym.envs.swe.swebench_grading.swebench_verdict` reads."""
    duration_s: float = 0.0
    """Wall-clock seconds spent grading."""

    @property
    def reward(self) -> float:
        """1.0 when resolved, else 0.0."""
        return 1.0 if self.resolved else 0.0

    @property
    def setup_error(self) -> bool:
        """True when the verdict says nothing about the patch (the instance's tests did not
        run as listed): such an episode is masked, not scored."""
        return self.error == "tests_missing"

    def counts(self) -> dict[str, int]:
        """Passed and total counts of each list."""
        out = {}
        for kind, key in (("FAIL_TO_PASS", "f2p"), ("PASS_TO_PASS", "p2p")):
            mine = [t for t in self.tests if t.kind == kind]
            out[f"{key}_passed"] = sum(t.passed for t in mine)
            out[f"{key}_total"] = len(mine)
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what the env puts in step metadata)."""
        return {
            "instance_id": self.instance_id,
            "resolved": self.resolved,
            "patch_applied": self.patch_applied,
            **self.counts(),
            "tests": [t.to_dict() for t in self.tests],
            "discarded_files": list(self.discarded_files),
            "error": self.error,
            "missing": list(self.missing),
            "duration_s": round(self.duration_s, 3),
        }


@dataclass(frozen=True)
class SWEEnvConfig:
    """Settings of the ``swe`` env (``env_config`` keys of the same names)."""

    sandbox: SandboxKind = "docker"
    """``docker`` (a task-profile container from the instance's env image, as SWE-bench) or
    ``local`` (local processes under bubblewrap with the host's ``python3``; for machines
    without Docker and for quick tests; an instance's ``environment_setup``, which belongs to
    the image, is not run there, its ``install`` is)."""
    max_turns: int = 30
    """Most model turns; at the limit the working tree's diff is graded (auto-submit)."""
    command_timeout_s: float = 60.0
    """Deadline of one ``bash`` command."""
    test_timeout_s: float = 600.0
    """Deadline of the whole test run when grading."""
    max_observation_chars: int = 8000
    """Observations longer than this are cut in the middle, with a marker saying how much."""
    memory_mb: int = 2048
    """Memory limit of the agent's and the grader's sandbox."""
    pids: int = 512
    """Process limit of each sandbox."""
    cpus: float = 1.0
    """CPU share of each sandbox."""
    grade_on_truncation: bool = True
    """Grade the working tree's diff when the turn limit ends the episode (as ``submit`` would)."""
    repos_dir: str | None = None
    """Folder of repositories named ``owner__name`` (a directory or ``owner__name.bundle``)
    for instances that carry only ``repo``."""
    parser: str = "hermes"
    """Tool-call parser of the model's turns (see :func:`skyrl_gym.tools.get_parser`)."""

    def __post_init__(self) -> None:
        if self.sandbox not in ("docker", "local"):
            raise ConfigError(f"unknown sandbox {self.sandbox!r}; use 'docker' or 'local'")
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {self.max_turns}")
        for name in ("command_timeout_s", "test_timeout_s", "cpus"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.max_observation_chars < 200:
            raise ConfigError(f"max_observation_chars must be >= 200, got {self.max_observation_chars}")
