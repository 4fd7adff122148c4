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
    "is_swesmith_row",
    "base_commit_of",
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
