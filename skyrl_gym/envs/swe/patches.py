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

__all__ = [
    "FileDiff",
    "split_patch",
    "patch_files",
    "protected_reason",
    "filter_patch",
    "files_under_test",
    "reverse_patch",
    "test_file_of",
]

_HEADER = re.compile(r"^diff --git (?:\"?a/(.+?)\"?) (?:\"?b/(.+?)\"?)$")
_HUNK = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$", re.DOTALL)
#: A unittest-style test id: ``method (module.Class.method)`` (Python 3.11+) or
#: ``method (module.Class)`` (older Pythons, Django's runner).
_UNITTEST_ID = re.compile(r"^(\w+) \(([\w.]+)\)$")


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


def test_file_of(test_id: str) -> str | None:
    """The file of a test id: of a pytest node id (``tests/t.py::test_x[1]`` -> ``tests/t.py``)
    or of a unittest-style id (``test_x (tests.test_t.TestT.test_x)`` -> ``tests/test_t.py``,
    relative to the directory the runner imports from); None when the id names no file."""
    path = test_id.split("::", 1)[0]
    if "::" in test_id and path.endswith(".py"):
        return path
    match = _UNITTEST_ID.match(test_id)
    if match is None:
        return None
    parts = match.group(2).split(".")
    module = parts[:-2] if parts[-1] == match.group(1) else parts[:-1]
    return "/".join(module) + ".py" if module else None


_SWAPPED_HEADERS = (
    ("new file mode ", "deleted file mode "),
    ("old mode ", "new mode "),
    ("rename from ", "rename to "),
    ("copy from ", "copy to "),
)


def _reverse_header_line(line: str) -> str:
    m = _HEADER.match(line.rstrip("\n"))
    if m:
        return f"diff --git a/{m.group(2)} b/{m.group(1)}\n"
    for one, other in _SWAPPED_HEADERS:
        if line.startswith(one):
            return other + line[len(one) :]
        if line.startswith(other):
            return one + line[len(other) :]
    if line.startswith("index "):
        span, _, mode = line[len("index ") :].partition(" ")
        old, _, new = span.strip().partition("..")
        return f"index {new}..{old}" + (f" {mode}" if mode else "\n")
    return line


def _reverse_section(text: str) -> str:
    lines = text.splitlines(keepends=True)
    head_end = next((i for i, line in enumerate(lines) if line.startswith("@@")), len(lines))
    head = lines[:head_end]
    if any(line.startswith(("GIT binary patch", "Binary files ")) for line in lines):
        raise ValueError("a binary patch cannot be reversed as text")
    out: list[str] = []
    minus = plus = None
    for line in head:
        if line.startswith("--- "):
            minus = line[4:]
        elif line.startswith("+++ "):
            plus = line[4:]
        else:
            out.append(_reverse_header_line(line))
    modes = [i for i, line in enumerate(out) if line.startswith(("old mode ", "new mode "))]
    if len(modes) == 2:  # keep git's order: old mode, then new mode
        out[modes[0]], out[modes[1]] = out[modes[1]], out[modes[0]]
    if minus is not None and plus is not None:
        # the old side's name becomes the new side's, keeping each side's a/ and b/ prefix
        def side(path: str, prefix: str) -> str:
            bare = path.rstrip("\n")
            if bare != "/dev/null" and bare[:2] in ("a/", "b/"):
                bare = prefix + bare[2:]
            return bare + "\n"

        out += ["--- " + side(plus, "a/"), "+++ " + side(minus, "b/")]
    # the body: hunk headers swap their ranges; in each run of changed lines the lines that
    # were added become removed ones (listed first, as diff writes them) and the other way round
    run_minus: list[str] = []
    run_plus: list[str] = []

    def flush() -> None:
        out.extend(run_minus)
        out.extend(run_plus)
        run_minus.clear()
        run_plus.clear()

    last: list[str] | None = None
    for line in lines[head_end:]:
        if line.startswith("@@"):
            flush()
            m = _HUNK.match(line)
            if m is None:
                raise ValueError(f"not a hunk header: {line.rstrip()!r}")
            out.append(f"@@ -{m.group(2)} +{m.group(1)} @@{m.group(3)}")
            last = None
        elif line.startswith("+"):
            run_minus.append("-" + line[1:])
            last = run_minus
        elif line.startswith("-"):
            run_plus.append("+" + line[1:])
            last = run_plus
        elif line.startswith("\\"):  # "\ No newline at end of file" belongs to the line before it
            (last if last is not None else out).append(line)
        else:
            flush()
            out.append(line)
            last = out
    flush()
    return "".join(out)


def reverse_patch(patch: str) -> str:
    """The patch that undoes ``patch`` (what ``git apply -R`` applies), as text.

    SWE-smith rows carry the diff that puts a bug in; the gold fix is its reverse. Raises
    ``ValueError`` for a binary patch or a malformed hunk header."""
    sections = split_patch(patch)
    if not sections:
        raise ValueError("no file sections in the patch")
    text = "".join(_reverse_section(s.text) for s in sections)
    return text if text.endswith("\n") else text + "\n"


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
