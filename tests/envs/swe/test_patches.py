"""Splitting patches and the files grading ignores."""

from __future__ import annotations

import pytest

from skyrl_gym.envs.swe import filter_patch, protected_reason, split_patch
from skyrl_gym.envs.swe.patches import files_under_test, patch_files


def section(path: str, *, new: bool = False, body: str = "+x = 1\n", mode: str = "100644") -> str:
    head = f"diff --git a/{path} b/{path}\n"
    if new:
        return (
            head
            + f"new file mode {mode}\nindex 0000000..1111111\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n{body}"
        )
    return head + f"index 1111111..2222222 100644\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-y = 0\n{body}"


def test_split_and_paths():
    patch = (
        section("pkg/a.py")
        + section("tests/test_a.py", new=True)
        + ("diff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n")
        + "diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n--- a/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    )
    sections = split_patch(patch)
    assert [(s.old_path, s.new_path) for s in sections] == [
        ("pkg/a.py", "pkg/a.py"),
        (None, "tests/test_a.py"),
        ("old.py", "new.py"),
        ("gone.py", None),
    ]
    assert "".join(s.text for s in sections) == patch
    assert patch_files(patch) == ["pkg/a.py", "tests/test_a.py", "old.py", "new.py", "gone.py"]
    assert files_under_test(patch) == ["pkg/a.py", "tests/test_a.py", "new.py"]
    plain = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert patch_files(plain) == ["x.py"]


@pytest.mark.parametrize(
    ("path", "added", "reason"),
    [
        ("conftest.py", False, "test configuration"),
        ("pkg/conftest.py", True, "test configuration"),
        ("pytest.ini", False, "test configuration"),
        ("tox.ini", False, "test configuration"),
        ("setup.cfg", False, "test configuration"),
        ("pyproject.toml", False, "test configuration"),
        ("tests/helpers.py", False, "test file"),
        ("pkg/test_x.py", True, "test file"),
        ("pkg/x_test.py", False, "test file"),
        ("sitecustomize.py", True, "start-up hook"),
        ("lib/evil.pth", True, "start-up hook"),
        ("evil-1.0.dist-info/entry_points.txt", True, "plugin entry points"),
        ("json.py", True, "shadows the module 'json'"),
        ("pytest.py", True, "shadows the module 'pytest'"),
        ("_pytest/__init__.py", True, "shadows the module '_pytest'"),
        ("../outside.py", False, "outside the repository"),
        ("pkg/json.py", True, None),  # inside a package: no shadowing
        ("pkg/core.py", False, None),
        ("json.py", False, None),  # an existing top-level module may be edited
    ],
)
def test_protected_reason(path, added, reason):
    got = protected_reason(path, added=added, base_packages={"pkg"})
    assert (got is None) if reason is None else (reason in (got or "")), got


def test_filter_keeps_source_and_drops_the_rest():
    patch = (
        section("pkg/core.py")
        + section("conftest.py", new=True)
        + section("tests/test_core.py")
        + section("pkg/link", new=True, body="+../tests\n", mode="120000")
        + section("newpkg/__init__.py", new=True)
        + section("newpkg/types.py", new=True)
        + section("data/fixture.txt")
    )
    kept, dropped = filter_patch(patch, test_patch_files=["data/fixture.txt"], base_packages={"pkg"})
    assert patch_files(kept) == ["pkg/core.py", "newpkg/__init__.py", "newpkg/types.py"]
    assert dropped == ["conftest.py", "tests/test_core.py", "pkg/link", "data/fixture.txt"]
    assert filter_patch("", base_packages=set()) == ("", [])
