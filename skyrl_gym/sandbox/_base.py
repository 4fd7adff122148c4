"""What every backend shares: the async twins, the context manager, idempotent close."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from skyrl_gym.errors import SandboxError
from skyrl_gym.sandbox.types import Command, ExecResult

__all__ = ["BaseSandbox", "run_blocking"]

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _get_executor() -> ThreadPoolExecutor:
    """A thread pool for the async twins, sized for many episodes at once (the loop's default
    pool has only ``cpu_count + 4`` threads, which would serialize a rollout's sandbox calls)."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=128, thread_name_prefix="skyrl-sandbox")
        return _executor


async def run_blocking(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a blocking sandbox call in the sandbox thread pool and await it."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_get_executor(), functools.partial(fn, *args, **kwargs))


class BaseSandbox:
    """Base of the backends: subclasses implement the blocking methods and ``_close``."""

    workdir: str = "/"
    _closed: bool = False

    # -- to implement ------------------------------------------------------------------------
    def exec(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | str | None = None,
    ) -> ExecResult:
        raise NotImplementedError

    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        raise NotImplementedError

    def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        raise NotImplementedError

    def upload(self, local_dir: str | os.PathLike[str], remote_dir: str) -> None:
        raise NotImplementedError

    def download(self, remote_dir: str, local_dir: str | os.PathLike[str]) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(f"{type(self).__name__} is closed; create a new sandbox")

    def close(self) -> None:
        """Stop everything the sandbox runs and release its resources. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._close()

    def __enter__(self) -> BaseSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> BaseSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aexec(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | str | None = None,
    ) -> ExecResult:
        """Coroutine twin of :meth:`exec`."""
        return await run_blocking(self.exec, cmd, timeout=timeout, env=env, workdir=workdir, stdin=stdin)

    async def aread_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Coroutine twin of :meth:`read_file`."""
        return await run_blocking(self.read_file, path, max_bytes=max_bytes)

    async def awrite_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Coroutine twin of :meth:`write_file`."""
        await run_blocking(self.write_file, path, data, mode=mode)

    async def aupload(self, local_dir: str | os.PathLike[str], remote_dir: str) -> None:
        """Coroutine twin of :meth:`upload`."""
        await run_blocking(self.upload, local_dir, remote_dir)

    async def adownload(self, remote_dir: str, local_dir: str | os.PathLike[str]) -> None:
        """Coroutine twin of :meth:`download`."""
        await run_blocking(self.download, remote_dir, local_dir)

    async def aclose(self) -> None:
        """Coroutine twin of :meth:`close`."""
        await run_blocking(self.close)
