"""Unified diffs: split a patch into files, name the files it touches, drop the protected ones.

The grader applies a model's patch only after :func:`filter_patch` has removed every file
section that could change how the tests run rather than what they test (see
:func:`protected_reason`): test files, ``conftest.py``, pytest configuration (``pytest.ini``,
``tox.ini``, ``setup.cfg``, ``pyproject.toml``), import hooks (``*.pth``, ``sitecustomize``),
package metadata that could register plugins (``*.dist-info``, ``*.egg-info``), files the
``test_patch`` touches, and new top-level modules that would shadow the standard library or the
test runner. Those files stay as they are at ``base_commit``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

__all__ = ["FileDiff", "split_patch", "patch_files", "protected_reason", "filter_patch", "files_under_test"]

_HEADER = re.compile(r"^diff --git (?:\"?a/(.+?)\"?) (?:\"?b/(.+?)\"?)$")


@dataclass(frozen=True)
class FileDiff:
    """The part of a patch about one file."""

    old_path: str | None
    """Path before (None when the file is new)."""
    new_path: str | None
    """Path after (None when the file is deleted)."""
    text: str
    """The section's text, header included."""

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the section touches (one, or two for a rename)."""
        return tuple(dict.fromkeys(p for p in (self.old_path, self.new_path) if p))

    @property
    def symlink(self) -> bool:
        """True when the section creates or changes a symbolic link."""
        head = self.text.split("@@", 1)[0]
        return "mode 120000" in head

    @property
    def added(self) -> bool:
        """True when the section creates a file."""
        return self.old_path is None


def _strip(path: str, prefix: str) -> str | None:
    path = path.strip().split("\t", 1)[0].strip('"')
    if path == "/dev/null":
        return None
    return path[len(prefix) :] if path.startswith(prefix) else path


def split_patch(patch: str) -> list[FileDiff]:
    """The file sections of a git-style or plain unified diff, in order."""
    lines = patch.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("diff --git ")]
    if not starts:  # a plain unified diff: sections start at ``--- `` followed by ``+++ ``
        starts = [
            i
            for i, line in enumerate(lines)
            if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
        ]
    sections = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        chunk = lines[start:end]
        old = new = None
        m = _HEADER.match(chunk[0].rstrip("\n"))
        if m:
            old, new = m.group(1), m.group(2)
        for line in chunk:
            if line.startswith("@@"):
                break
            if line.startswith("--- "):
                old = _strip(line[4:], "a/")
            elif line.startswith("+++ "):
                new = _strip(line[4:], "b/")
            elif line.startswith("new file mode"):
                old = None
            elif line.startswith("deleted file mode"):
                new = None
            elif line.startswith("rename from "):
                old = line[len("rename from ") :].strip()
            elif line.startswith("rename to "):
                new = line[len("rename to ") :].strip()
        sections.append(FileDiff(old, new, "".join(chunk)))
    return sections


def patch_files(patch: str) -> list[str]:
    """Every path a patch touches, in order, without repeats."""
    return list(dict.fromkeys(p for section in split_patch(patch) for p in section.paths))


def files_under_test(test_patch: str) -> list[str]:
    """The files of a ``test_patch`` that exist after it (what the test command runs)."""
    return [s.new_path for s in split_patch(test_patch) if s.new_path]


_CONFIG_FILES = {"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", ".pytest.ini"}
_HOOK_FILES = {"sitecustomize.py", "usercustomize.py"}
_RUNNER_MODULES = {"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "pygments"}
_TEST_DIRS = {"test", "tests", "testing"}
_SHADOWED = set(sys.stdlib_module_names) | _RUNNER_MODULES


def _is_test_file(path: PurePosixPath) -> bool:
    name = path.name
    if any(part in _TEST_DIRS for part in path.parts[:-1]):
        return True
    return name.startswith("test_") and name.endswith(".py") or name.endswith("_test.py")


def protected_reason(path: str, *, added: bool = False, base_packages: Collection[str] = ()) -> str | None:
    """Why grading ignores a change to ``path`` (None: the change counts).

    ``added``: the patch creates the file. ``base_packages``: directories that hold an
    ``__init__.py`` (a new module inside a package cannot shadow a top-level import)."""
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts:
        return "path outside the repository"
    name = p.name
    if name in _CONFIG_FILES:
        return "test configuration"
    if name in _HOOK_FILES or name.endswith(".pth"):
        return "interpreter start-up hook"
    if any(part.endswith((".dist-info", ".egg-info")) for part in p.parts):
        return "package metadata (plugin entry points)"
    if _is_test_file(p):
        return "test file"
    if added:
        # a new module or package at an import root shadows the standard library or the runner
        for depth, part in enumerate(p.parts):
            parent = "/".join(p.parts[:depth])
            if parent and parent in base_packages:
                break
            module = part[:-3] if part.endswith(".py") else part.split(".", 1)[0]
            if module in _SHADOWED:
                return f"shadows the module {module!r}"
    return None


def filter_patch(
    patch: str, *, test_patch_files: Iterable[str] = (), base_packages: Collection[str] = ()
) -> tuple[str, list[str]]:
    """The patch without its protected sections, and the paths that were dropped."""
    keep, dropped = [], []
    extra = set(test_patch_files)
    sections = split_patch(patch)
    packages = set(base_packages) | {
        str(PurePosixPath(s.new_path).parent)
        for s in sections
        if s.new_path and PurePosixPath(s.new_path).name == "__init__.py"
    }
    for section in sections:
        if section.symlink:
            dropped.extend(section.paths)
            continue
        reasons = [
            protected_reason(path, added=section.added, base_packages=packages) for path in section.paths
        ]
        if any(reasons) or any(path in extra for path in section.paths):
            dropped.extend(section.paths)
        else:
            keep.append(section.text)
    text = "".join(keep)
    if text and not text.endswith("\n"):
        text += "\n"
    return text, list(dict.fromkeys(dropped))
