"""Fixtures of the Harbor tests: task folders made on the fly and the no-leak check (the base
images come from the root conftest's ``base_images``)."""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import docker_available

TOML = """\
[agent]
timeout_sec = 60.0

[verifier]
timeout_sec = 30.0

[environment]
docker_image = "skyrl-sandbox/minimal:latest"
memory_mb = 256
network_mode = "no-network"
"""


@pytest.fixture
def make_task(tmp_path: Path) -> Callable[..., Path]:
    """``make_task(name, test_sh=..., toml=..., solve_sh=..., files={rel: text})`` writes a task
    folder (by default on the local minimal image: nothing to build) and returns its path."""

    def make(
        name: str = "t",
        *,
        test_sh: str = "echo 1 > /logs/verifier/reward.txt\n",
        toml: str = TOML,
        instruction: str = "Do the thing.\n",
        solve_sh: str | None = "true\n",
        dockerfile: str | None = None,
        files: dict[str, str] | None = None,
    ) -> Path:
        root = tmp_path / name
        (root / "tests").mkdir(parents=True)
        (root / "environment").mkdir()
        (root / "task.toml").write_text(textwrap.dedent(toml))
        (root / "instruction.md").write_text(instruction)
        (root / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test_sh))
        if solve_sh is not None:
            (root / "solution").mkdir()
            (root / "solution" / "solve.sh").write_text("#!/bin/bash\n" + textwrap.dedent(solve_sh))
        if dockerfile is not None:
            (root / "environment" / "Dockerfile").write_text(textwrap.dedent(dockerfile))
        for rel, text in (files or {}).items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        return root

    return make


@pytest.fixture
def bundled_copy(tmp_path: Path) -> Callable[[str], Path]:
    """A copy of a bundled task that a test may change."""
    from harbor_adapter import bundled_tasks_dir

    def copy(name: str) -> Path:
        dest = tmp_path / "copies" / name
        shutil.copytree(bundled_tasks_dir() / name, dest)
        return dest

    return copy


def _my_task_containers(client) -> list:
    return client.containers.list(
        all=True, filters={"label": [f"skyrl.owner.pid={os.getpid()}", "harbor.task"]}, ignore_removed=True
    )


@pytest.fixture(autouse=True)
def no_leaked_task_containers(request):
    """After each Docker test, no task container made by this process is left."""
    yield
    if request.node.get_closest_marker("docker") is None or not docker_available():
        return
    import docker

    client = docker.from_env()
    try:
        left = _my_task_containers(client)
        names = [c.name for c in left]
        for c in left:
            c.remove(force=True)
    finally:
        client.close()
    assert not names, f"task containers leaked by {request.node.name}: {names}"
