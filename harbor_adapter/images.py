"""Build a task's image from ``environment/``, cached by a hash of its content, under a deadline.

The tag is ``skyrl-harbor/<task>:<hash>`` where the hash covers every file of the build
context (path, mode, bytes). When that tag exists, nothing is built. Builds run with no
network (``FROM`` must name a local image, e.g. ``skyrl-sandbox/python``; see
``skyrl sandbox build-images``) and never pull. One build per tag at a time, across threads and
processes (a lock file), so many episodes of one task build it once.

The deadline (``[environment].build_timeout_sec``) is enforced on the client: when it passes,
the container of the running ``RUN`` step is killed (the build fails there) and the build's
connection is closed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harbor_adapter.errors import ImageBuildError, TrialTimeoutError
from harbor_adapter.types import HarborTask
from skyrl_gym.sandbox.dockerlib import docker_client, docker_module, find_image

__all__ = [
    "context_hash",
    "folder_hash",
    "folder_tag",
    "ensure_built",
    "image_tag",
    "ensure_image",
    "image_workdir",
    "base_images",
    "IMAGE_REPO",
    "LABEL_TASK",
]

IMAGE_REPO = "skyrl-harbor"
LABEL_TASK = "skyrl.harbor.task"
_RUNNING = re.compile(r"Running in ([0-9a-f]{12,64})")
_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


def context_hash(task: HarborTask) -> str:
    """A SHA-256 of the build context (``environment/``): relative paths, modes and bytes."""
    return folder_hash(task.environment_dir)


def folder_hash(root: Path, dockerfile: str = "Dockerfile") -> str:
    """A SHA-256 of a build context: relative paths, modes and bytes (and the Dockerfile's name
    when it is not ``Dockerfile``)."""
    h = hashlib.sha256(b"skyrl-harbor-image-v1\0")
    if dockerfile != "Dockerfile":
        h.update(b"dockerfile\0" + dockerfile.encode() + b"\0")
    for p in sorted(root.rglob("*")):
        if p.is_dir():
            continue
        rel = p.relative_to(root).as_posix()
        h.update(rel.encode() + b"\0" + oct(p.stat().st_mode & 0o777).encode() + b"\0")
        h.update(p.read_bytes() if p.is_file() else os.readlink(p).encode())
        h.update(b"\0")
    return h.hexdigest()


def image_tag(task: HarborTask) -> str:
    """The image a task runs in: ``[environment].docker_image``, else the content-hash tag."""
    if task.config.environment.docker_image:
        return task.config.environment.docker_image
    return folder_tag(task.name, task.environment_dir)


def folder_tag(name: str, folder: Path, dockerfile: str = "Dockerfile") -> str:
    """``skyrl-harbor/<name>:<hash of folder>``: the tag of an image built from ``folder`` (a
    task's ``environment/``, a service's build folder, a verifier's ``tests/``), the name made
    safe for Docker."""
    safe = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._") or "task"
    return f"{IMAGE_REPO}/{safe[:100]}:{folder_hash(folder, dockerfile)[:16]}"


def _lock_for(tag: str) -> threading.Lock:
    with _thread_locks_guard:
        return _thread_locks.setdefault(tag, threading.Lock())


def ensure_image(task: HarborTask, *, deadline_s: float | None = None) -> tuple[str, bool, float]:
    """Make sure the task's image exists; returns ``(tag, built, seconds)``.

    ``deadline_s`` defaults to ``[environment].build_timeout_sec`` and also covers waiting for
    another build of the same tag. Raises :class:`TrialTimeoutError` past it and
    :class:`ImageBuildError` when the build fails (with the end of its log) or a named
    ``docker_image`` is not there."""
    start = time.monotonic()
    budget = task.config.environment.build_timeout_sec if deadline_s is None else deadline_s
    client = docker_client()
    tag = image_tag(task)
    if task.config.environment.docker_image:
        if find_image(client, tag) is None:
            raise ImageBuildError(
                f"task {task.name!r}: image {tag!r} is not on this machine and no registry is pulled; "
                "build or load it first, or give the task an environment/Dockerfile"
            )
        return tag, False, time.monotonic() - start
    built, seconds = ensure_built(task.name, task.environment_dir, "Dockerfile", tag, budget)
    return tag, built, seconds


def ensure_built(
    name: str, context: Path, dockerfile: str, tag: str, budget: float, *, client: Any = None
) -> tuple[bool, float]:
    """Build ``tag`` from ``context`` (its ``dockerfile``) unless it exists: the main image of
    a task, or a service's of a multi-container task. ``(built, seconds)``; the deadline covers
    waiting for another build of the same tag (in this process or another)."""
    start = time.monotonic()
    client = client or docker_client()
    if find_image(client, tag) is not None:
        return False, time.monotonic() - start
    _check_bases(client, name, context / dockerfile)
    lock = _lock_for(tag)
    if not lock.acquire(timeout=max(budget, 0.001)):
        raise TrialTimeoutError(f"task {name!r}: waited {budget:.0f} s for another build of {tag}")
    try:
        lock_path = os.path.join(
            tempfile.gettempdir(), f"skyrl-harbor-{tag.replace('/', '_').replace(':', '_')}.lock"
        )
        with open(lock_path, "w") as fh:
            while True:  # another process may be building the same tag
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() - start > budget:
                        raise TrialTimeoutError(
                            f"task {name!r}: waited {budget:.0f} s for another process's build of {tag}"
                        ) from None
                    time.sleep(0.2)
            if find_image(client, tag) is not None:
                return False, time.monotonic() - start
            _build(name, context, dockerfile, tag, budget - (time.monotonic() - start))
    finally:
        lock.release()
    return True, time.monotonic() - start


def base_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile's ``FROM`` lines name (not earlier stages, not ``scratch``,
    not names built from ``ARG`` values, which cannot be known here)."""
    stages: set[str] = set()
    images = []
    for line in dockerfile.splitlines():
        words = line.strip().split()
        if not words or words[0].upper() != "FROM":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if not args:
            continue
        ref = args[0]
        if len(args) >= 3 and args[1].upper() == "AS":
            stages.add(args[2].lower())
        if ref.lower() in stages or ref == "scratch" or "$" in ref:
            continue
        images.append(ref)
    return images


def _check_bases(client: Any, name: str, dockerfile: Path) -> None:
    """Fail before building when a ``FROM`` image is not on this machine: a build would try a
    registry (no network here; ``SKYRL_HARBOR_ALLOW_PULL=1`` allows it where there is one)."""
    if os.environ.get("SKYRL_HARBOR_ALLOW_PULL") == "1" or not dockerfile.is_file():
        return
    missing = [ref for ref in base_images(dockerfile.read_text()) if find_image(client, ref) is None]
    if missing:
        raise ImageBuildError(
            f"task {name!r}: base image(s) {missing} not on this machine. FROM must name a local "
            "image: no registry is reachable; build the base images with `skyrl sandbox build-images` and "
            "use FROM skyrl-sandbox/python or skyrl-sandbox/minimal (or set SKYRL_HARBOR_ALLOW_PULL=1 "
            "where a registry is reachable)"
        )


def _build(name: str, context: Path, dockerfile: str, tag: str, budget: float) -> None:
    if budget <= 0:
        raise TrialTimeoutError(f"task {name!r}: no time left to build {tag}")
    docker = docker_module()
    # a client of its own: closing it at the deadline drops the connection and cancels the build
    api = docker.APIClient(**docker.utils.kwargs_from_env(), timeout=max(1, int(budget) + 1))
    log: list[str] = []
    error: list[str] = []
    running: list[str] = []  # the container of the RUN step in progress (legacy builder)
    done = threading.Event()

    def run() -> None:
        try:
            for chunk in api.build(
                path=str(context),
                dockerfile=dockerfile,
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,  # (the daemon still pulls a missing FROM image: _check_bases first)
                network_mode="none",
                labels={LABEL_TASK: name},
                decode=True,
            ):
                if "stream" in chunk:
                    log.append(chunk["stream"])
                    found = _RUNNING.search(chunk["stream"])
                    if found:
                        running.append(found.group(1))
                if "error" in chunk:
                    error.append(str(chunk["error"]))
                if done.is_set():
                    break
        except Exception as exc:  # noqa: BLE001 - reported below
            if not done.is_set():
                error.append(f"{type(exc).__name__}: {exc}")
        finally:
            done.set()

    thread = threading.Thread(target=run, name=f"harbor-build-{name}", daemon=True)
    thread.start()
    finished = done.wait(budget)
    if not finished:
        done.set()
        # the daemon does not always notice a dropped connection: stop the step that runs
        for cid in running[-1:]:
            with contextlib.suppress(Exception):
                api.kill(cid)
        api.close()
        thread.join(5)
        raise TrialTimeoutError(
            f"task {name!r}: building {tag} took longer than {budget:.0f} s ([environment].build_timeout_sec)"
        )
    thread.join(5)
    api.close()
    tail = "".join(log)[-3000:]
    if error or find_image(docker_client(), tag) is None:
        hint = ""
        if any("pull access denied" in e or "not found" in e.lower() for e in error):
            hint = (
                " (FROM must name a local image: no registry is reachable; build the base images with "
                "`skyrl sandbox build-images` and use FROM skyrl-sandbox/python or skyrl-sandbox/minimal)"
            )
        raise ImageBuildError(f"task {name!r}: building {tag} failed: {'; '.join(error)}{hint}\n{tail}")


def image_workdir(tag: str) -> str:
    """The image's ``WORKDIR`` (``/`` when it sets none)."""
    attrs = docker_client().images.get(tag).attrs
    return (attrs.get("Config") or {}).get("WorkingDir") or "/"
