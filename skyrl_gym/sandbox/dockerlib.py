"""The Docker SDK, imported only when a Docker sandbox is used (it is the ``docker`` extra); shared
with the Harbor adapter, hence public."""

from __future__ import annotations

import os
import threading
from typing import Any

from skyrl_gym.errors import MissingDependencyError, SandboxError

__all__ = ["docker_module", "docker_client", "find_image"]

_lock = threading.Lock()
_client: Any = None
_client_pid: int | None = None


def docker_module() -> Any:
    """The ``docker`` package, or :class:`MissingDependencyError` naming the extra."""
    try:
        import docker
    except ImportError as exc:
        raise MissingDependencyError("docker", "docker", "Docker sandboxes") from exc
    return docker


def docker_client() -> Any:
    """A Docker client for this process (one per process; rebuilt after ``fork``).

    Raises :class:`SandboxError` saying how to start a daemon when none answers.
    """
    global _client, _client_pid
    with _lock:
        if _client is not None and _client_pid == os.getpid():
            return _client
        docker = docker_module()
        try:
            client = docker.from_env(timeout=120, max_pool_size=64)  # many episodes at once
            client.ping()
        except Exception as exc:
            raise SandboxError(
                f"no Docker daemon answers ({exc}); start one (scripts/start-docker.sh, or "
                "`dockerd &` as root) or set DOCKER_HOST"
            ) from exc
        _client, _client_pid = client, os.getpid()
        return client


def find_image(client: Any, ref: str) -> Any | None:
    """The image ``ref`` on this machine, or None when there is none."""
    try:
        return client.images.get(ref)
    except docker_module().errors.ImageNotFound:
        return None
