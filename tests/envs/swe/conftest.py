"""Fixtures of the SWE tests: the bundled instances and a way to write real patches."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.envs.swe import SWEInstance, bundled_instances

FLIP_HOOK = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@pytest.fixture(scope="session")
def instances() -> list[SWEInstance]:
    return bundled_instances()


@pytest.fixture(scope="session")
def checkout(tmp_path_factory, instances) -> Path:
    """A clone of the bundled repository (all commits)."""
    path = tmp_path_factory.mktemp("pocketlib") / "repo"
    subprocess.run(["git", "clone", "-q", instances[0].repo_path, str(path)], check=True)
    return path


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def base_file(checkout) -> Callable[[SWEInstance, str], str]:
    """The text of a file at an instance's base commit."""
    return lambda instance, path: _git(checkout, "show", f"{instance.base_commit}:{path}")


@pytest.fixture
def make_patch(checkout) -> Callable[..., str]:
    """``make_patch(instance, {path: text or None})``: the git diff of those edits at the
    instance's base commit (None deletes the file); ``apply_gold=True`` starts from the fix."""

    def make(instance: SWEInstance, files: dict[str, str | None], *, apply_gold: bool = False) -> str:
        _git(checkout, "checkout", "-q", "--force", instance.base_commit)
        _git(checkout, "clean", "-fdq")
        if apply_gold:
            subprocess.run(["git", "apply", "-"], cwd=checkout, input=instance.patch, text=True, check=True)
        for path, text in files.items():
            target = checkout / path
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        _git(checkout, "add", "-A")
        diff = _git(checkout, "diff", "--cached", "--binary")
        _git(checkout, "reset", "-q", "--hard")
        _git(checkout, "clean", "-fdq")
        return diff

    return make


@pytest.fixture(scope="session", autouse=True)
def swe_registered():
    """``swe`` is registered through the package's entry point; a checkout that is not
    installed again since the entry point was added registers it here."""
    if "swe" not in {s.id for s in skyrl_gym.list_envs()}:
        skyrl_gym.register("swe", "skyrl_gym.envs.swe.env:SWEEnv", source="builtin")
