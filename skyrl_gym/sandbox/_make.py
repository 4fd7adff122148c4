"""One way to get a sandbox: :func:`make_sandbox` builds what a :class:`SandboxSpec` says.

::

    spec = SandboxSpec("docker", limits, image="skyrl-sandbox/python:latest", pool_size=8)
    with make_sandbox(spec) as sb:     # leased from the shared warm pool; close() gives it back
        sb.exec("python3 -V")

- ``kind="local"``: a :class:`~skyrl_gym.sandbox.LocalSandbox` (processes with rlimits,
  bubblewrap where it works) in a fresh directory.
- ``kind="docker"``: a :class:`~skyrl_gym.sandbox.DockerSandbox` in the ``strict`` profile (for
  model-written code) or the ``task`` profile (task containers: Harbor, SWE).
- ``pool_size > 0`` (Docker): a :class:`PooledSandbox` leased from a process-wide warm
  :class:`~skyrl_gym.sandbox.SandboxPool`, one per container configuration, made on first use
  and closed at interpreter exit by the sandbox layer's cleanup or by
  :func:`close_shared_pools`. Closing the lease gives the container back (reset in the
  background, or replaced).
- ``start_timeout_s`` (Docker): the container starts in a thread; past the deadline
  :class:`~skyrl_gym.errors.SandboxTimeoutError` is raised and the late container is removed
  when it comes up.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from skyrl_gym.errors import SandboxTimeoutError
from skyrl_gym.sandbox._base import BaseSandbox
from skyrl_gym.sandbox.docker import DockerSandbox
from skyrl_gym.sandbox.local import LocalSandbox
from skyrl_gym.sandbox.pool import SandboxPool
from skyrl_gym.sandbox.types import (
    Command,
    DockerSandboxConfig,
    ExecResult,
    Sandbox,
    SandboxLimits,
    SandboxSpec,
)

__all__ = ["make_sandbox", "shared_pool", "close_shared_pools", "PooledSandbox"]

_pools_lock = threading.Lock()
_pools: dict[tuple[Any, ...], SandboxPool] = {}


def make_sandbox(spec: SandboxSpec) -> Sandbox:
    """A ready sandbox as ``spec`` says (see the module docstring); the caller closes it."""
    if spec.kind == "local":
        return LocalSandbox(spec.local_config())
    config = spec.docker_config()
    if spec.pool_size:
        pool = shared_pool(config, spec.pool_size)
        return PooledSandbox(pool, _started(pool.acquire, spec.start_timeout_s, config.image, pool.release))
    return _started(
        lambda: DockerSandbox(config, name_prefix=spec.name_prefix),
        spec.start_timeout_s,
        config.image,
        lambda sb: sb.close(),
    )


def _started(
    start: Callable[[], DockerSandbox],
    timeout_s: float | None,
    image: str,
    discard: Callable[[DockerSandbox], None],
) -> DockerSandbox:
    """``start()``, or with a deadline: in a thread, and past ``timeout_s`` give up (a late
    container is handed to ``discard`` when it comes up)."""
    if timeout_s is None:
        return start()
    box: list[DockerSandbox] = []
    err: list[BaseException] = []
    abandoned = threading.Event()
    lock = threading.Lock()

    def work() -> None:
        try:
            sb = start()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            err.append(exc)
            return
        with lock:
            if not abandoned.is_set():
                box.append(sb)
                return
        discard(sb)

    thread = threading.Thread(target=work, name="skyrl-sandbox-start", daemon=True)
    thread.start()
    thread.join(timeout_s)
    with lock:
        late = thread.is_alive() and not box and not err
        if late:
            abandoned.set()
    if late:
        raise SandboxTimeoutError(f"starting a container of {image!r} took longer than {timeout_s:g} s")
    if err:
        raise err[0]
    return box[0]


def _key(config: DockerSandboxConfig) -> tuple[Any, ...]:
    def items(m: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(m.items()))

    return (
        config.image,
        config.profile,
        config.limits,
        config.network,
        config.workdir,
        items(config.env),
        config.user,
        items(config.labels),
        config.pull,
        config.network_name,
        config.network_aliases,
    )


def shared_pool(config: DockerSandboxConfig, size: int) -> SandboxPool:
    """The process-wide pool of containers like ``config``, made with ``size`` warm sandboxes if
    it does not exist yet."""
    key = _key(config)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = SandboxPool(config, size=size)
        return pool


def close_shared_pools() -> None:
    """Close every shared pool (their containers are removed, leased ones included)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


class PooledSandbox(BaseSandbox):
    """A container leased from a :class:`~skyrl_gym.sandbox.SandboxPool`: a sandbox like any
    other, whose ``close()`` gives the container back to the pool (idempotent). After that every
    call raises :class:`~skyrl_gym.errors.SandboxError`."""

    def __init__(self, pool: SandboxPool, sandbox: DockerSandbox) -> None:
        self.pool = pool
        """The pool the container belongs to."""
        self.sandbox = sandbox
        """The leased container (do not close it: close the lease)."""
        self.workdir = sandbox.workdir
        self.limits: SandboxLimits = sandbox.limits
        self.config: DockerSandboxConfig = sandbox.config

    @property
    def name(self) -> str:
        """The container's name."""
        return self.sandbox.name

    def __repr__(self) -> str:
        return f"PooledSandbox({self.sandbox!r})"

    def exec(self, cmd: Command, **kwargs: Any) -> ExecResult:
        """:meth:`~skyrl_gym.sandbox.Sandbox.exec` in the leased container (same keywords)."""
        self._check_open()
        return self.sandbox.exec(cmd, **kwargs)

    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        self._check_open()
        return self.sandbox.read_file(path, max_bytes=max_bytes)

    def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        self._check_open()
        self.sandbox.write_file(path, data, mode=mode)

    def upload(self, local_dir: str | os.PathLike[str], remote_dir: str) -> None:
        self._check_open()
        self.sandbox.upload(local_dir, remote_dir)

    def download(self, remote_dir: str, local_dir: str | os.PathLike[str]) -> None:
        self._check_open()
        self.sandbox.download(remote_dir, local_dir)

    def _close(self) -> None:
        self.pool.release(self.sandbox)
