"""SWE-smith rows: an instance made by putting a bug into a working repository.

A SWE-smith row (``instance_id``, ``repo``, ``patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``,
``image_name``, ``problem_statement``, as published) has no ``base_commit`` or ``test_patch``:
its ``repo`` is SWE-smith's mirror ``swesmith/<owner>__<name>.<commit>`` of the repository at
``<commit>``, where every test passes, and its ``patch`` is the diff that puts the bug in. The
tests that judge a fix are the repository's own.

Here such a row becomes an :class:`~skyrl_gym.envs.swe.types.SWEInstance` the rest of the env
grades as any other:

- ``base_commit``: the row's, else the ``<commit>`` of its ``repo``.
- ``bug_patch``: the row's ``patch``; the gold ``patch`` is its reverse
  (:func:`~skyrl_gym.envs.swe.patches.reverse_patch`).
- The agent starts from ``base_commit`` with the bug applied and the files of the
  ``FAIL_TO_PASS`` tests removed, as SWE-smith's task branches remove them, so the agent never
  reads the tests that judge it (:func:`start_snapshot`).
- ``test_patch``: the diff that puts those files back as they are at ``base_commit``, made from
  the repository when the env or the grader opens it (:func:`with_test_patch`); grading then
  restores and applies it as for a SWE-bench row, and the model's edits to those files are
  dropped.

``image_name`` (SWE-smith's Docker Hub image) is kept with the row's other fields; offline, the
env image is built as for every row, from ``image`` / ``environment_setup`` / ``install``.

What differs between published rows, and what happens to each:

- The mirror's branches (two commits, or three with the ``Remove F2P Tests`` commit) are never
  read: the start state and the grading tree are made from the clean commit and the row's
  ``patch``, so nothing assumes ``HEAD~1``.
- A row written before July 2025 carries ``base_commit`` = the mirror's ``Bug Patch`` commit
  (the bug already in). Its patch then applies only in reverse there, and opening the repository
  raises :class:`~skyrl_gym.errors.ConfigError` saying so and what to do (drop ``base_commit``),
  instead of applying the bug twice.
- The log parser: the row's ``log_parser``, else SWE-bench's parser for the repository the
  mirror copies (:func:`upstream_repo`; Django's runner for ``swesmith/django__django.*``), else
  pytest's. A row that pytest would grade wrong (:func:`pytest_problem`: the Python profiles of
  :data:`NOT_PYTEST`, or test ids that are not ``path.py::name``, as every non-Python profile
  has) is refused naming its repository, unless it brings its own ``test_cmd`` and
  ``log_parser``.
- A row without a problem statement is skipped and counted by
  :func:`~skyrl_gym.envs.swe.instances.load_instances`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyrl_gym.envs.swe._repo import RepoSource
from skyrl_gym.envs.swe.patches import test_file_of
from skyrl_gym.envs.swe.types import SWEInstance

__all__ = [
    "SMITH_REPO",
    "NOT_PYTEST",
    "is_swesmith_row",
    "base_commit_of",
    "upstream_repo",
    "pytest_problem",
    "hidden_test_files",
    "start_snapshot",
    "start_files",
    "with_test_patch",
]

#: SWE-smith's mirror names: ``swesmith/<owner>__<name>.<commit>``.
SMITH_REPO = re.compile(r"^swesmith/(?P<stem>[^/]+?)\.(?P<commit>[0-9a-fA-F]{7,40})$")


def is_swesmith_row(row: Mapping[str, Any]) -> bool:
    """True for a row in SWE-smith's shape: no ``test_patch``, and a ``swesmith/...`` mirror as
    ``repo`` or an ``image_name`` column."""
    if row.get("test_patch"):
        return False
    return bool(SMITH_REPO.match(str(row.get("repo") or ""))) or "image_name" in row


def base_commit_of(row: Mapping[str, Any]) -> str | None:
    """The commit a SWE-smith row's bug is put into: its ``base_commit``, else its mirror's."""
    if row.get("base_commit"):
        return str(row["base_commit"])
    match = SMITH_REPO.match(str(row.get("repo") or ""))
    return match.group("commit") if match else None


#: Python repositories whose SWE-smith profile runs another test command than pytest on test
#: ids of another form, so pytest's parser would grade them wrong.
NOT_PYTEST: dict[str, str] = {
    "tornadoweb/tornado": "unittest's runner and ids",
    "un33k/python-slugify": "unittest's runner and ids",
    "python/mypy": "pytest -k on data-driven case names",
    "paramiko/paramiko": "a test command and log format of its own",
    "HIPS/autograd": "a test command and log format of its own",
}


def upstream_repo(row: Mapping[str, Any]) -> str | None:
    """``owner/name`` of the repository a SWE-smith mirror ``swesmith/<owner>__<name>.<commit>``
    copies (None for another ``repo``)."""
    match = SMITH_REPO.match(str(row.get("repo") or ""))
    if match is None or "__" not in match.group("stem"):
        return None
    owner, name = match.group("stem").split("__", 1)
    return f"{owner}/{name}"


def pytest_problem(repo: str | None, fail_to_pass: tuple[str, ...]) -> str | None:
    """Why a SWE-smith row cannot be graded with pytest and its parser, or None when it can:
    its repository's profile uses another runner (:data:`NOT_PYTEST`), or its test ids are not
    pytest's ``path.py::name`` (a non-Python profile: Go, JavaScript, Rust, ...)."""
    fix = "give the row a test_cmd and a log_parser (a registered parser) to grade it here"
    if repo in NOT_PYTEST:
        return f"SWE-smith grades {repo} with {NOT_PYTEST[repo]}, not pytest; {fix}"
    if not any(".py" in test for test in fail_to_pass):
        return (
            f"its FAIL_TO_PASS ids ({fail_to_pass[0]!r}, ...) are not pytest ids (path.py::name): a "
            f"profile of another language or test runner (repository {repo or 'unknown'}); {fix}"
        )
    return None


def hidden_test_files(instance: SWEInstance, base_files: set[str]) -> list[str]:
    """The files of ``instance``'s ``FAIL_TO_PASS`` tests that exist at ``base_commit`` (none
    for a row that is not SWE-smith's)."""
    if not instance.bug_patch:
        return []
    named = (test_file_of(t) for t in instance.FAIL_TO_PASS)
    return sorted({f for f in named if f and f in base_files})


def start_snapshot(instance: SWEInstance, source: RepoSource) -> Path:
    """The snapshot the agent starts from: ``base_commit``, with a SWE-smith row's bug applied
    and its hidden test files removed."""
    if not instance.bug_patch:
        return source.snapshot(instance.base_commit)
    hidden = hidden_test_files(instance, set(source.files(instance.base_commit)))
    return source.snapshot(instance.base_commit, apply=instance.bug_patch, remove=hidden)


def start_files(instance: SWEInstance, source: RepoSource) -> set[str]:
    """The files of the tree the agent starts from, as far as test files go (``base_commit``'s,
    less a SWE-smith row's hidden test files)."""
    files = set(source.files(instance.base_commit))
    return files - set(hidden_test_files(instance, files))


def with_test_patch(instance: SWEInstance, source: RepoSource) -> SWEInstance:
    """``instance`` with the ``test_patch`` of a SWE-smith row filled in from the repository
    (the hidden test files as new files); other instances are returned as they are."""
    if not instance.bug_patch or instance.test_patch:
        return instance
    hidden = hidden_test_files(instance, set(source.files(instance.base_commit)))
    if not hidden:
        return instance
    return dataclasses.replace(instance, test_patch=source.added_files_diff(instance.base_commit, hidden))
