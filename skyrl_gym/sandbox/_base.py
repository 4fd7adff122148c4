"""What every backend shares: the async twins, the context manager, idempotent close."""

from __future__ import annotations

import asyncio
import functools
import io
import os
import tarfile
import tempfile
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

from skyrl_gym.errors import SandboxError
from skyrl_gym.sandbox.types import (
    Command,
    ExecResult,
    SandboxFileNotFoundError,
    SandboxFileTooLargeError,
    SandboxNotAFileError,
    SandboxPathError,
)

__all__ = [
    "BaseSandbox",
    "Sink",
    "run_blocking",
    "TRANSFER_TIMEOUT_S",
    "READ_MAX_BYTES",
    "DOWNLOAD_MAX_BYTES",
]

#: Deadline of file transfers (they are not the model's commands).
TRANSFER_TIMEOUT_S = 300.0
#: Largest file ``read_file`` returns unless asked otherwise.
READ_MAX_BYTES = 64 * 1024 * 1024
#: Largest archive ``download`` accepts.
DOWNLOAD_MAX_BYTES = 4 * 1024 * 1024 * 1024


class Sink:
    """Collects bytes up to a limit, then only counts them."""

    def __init__(self, limit: int, spool: bool = False) -> None:
        self.limit = limit
        self.total = 0
        self.buf: Any = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024) if spool else io.BytesIO()

    def feed(self, data: bytes) -> None:
        room = self.limit - self.total
        if room > 0:
            self.buf.write(data[:room])
        self.total += len(data)

    @property
    def overflow(self) -> bool:
        return self.total > self.limit


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

    def _transfer(
        self, script: str, args: list[str], *, stdin: bytes | None, out: Any
    ) -> tuple[int | None, str]:
        """Run ``/bin/sh -c script skyrl-file *args`` inside the sandbox, with its own user and
        view of the filesystem, stdout into ``out``; return the exit code and stderr text."""
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    def _abs(self, path: str | None) -> str:
        if path is None:
            return self.workdir
        return str(PurePosixPath(self.workdir) / path)

    # -- files: through the sandbox itself, so they see what its commands see ------------------
    # (a symlink a command planted cannot make the host side read or write outside the sandbox)
    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of ``path`` (relative to the workdir unless absolute)."""
        self._check_open()
        limit = READ_MAX_BYTES if max_bytes is None else max_bytes
        out = Sink(limit)
        p = self._abs(path)
        rc, msg = self._transfer(
            '[ -e "$1" ] || exit 44; [ -f "$1" ] || exit 45; exec cat "$1"', [p], stdin=None, out=out
        )
        if rc == 44:
            raise SandboxFileNotFoundError(f"no file {p!r} in {self!r}")
        if rc == 45:
            raise SandboxNotAFileError(f"{p!r} in {self!r} is not a regular file")
        if rc != 0:  # no exit code at all: the sandbox itself failed, not the path
            error = SandboxError if rc is None else SandboxPathError
            raise error(f"reading {p!r} in {self!r} failed (exit {rc}): {msg}")
        if out.overflow:
            raise SandboxFileTooLargeError(f"{p!r} is {out.total} bytes, more than max_bytes={limit}")
        return out.buf.getvalue()

    def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Create or replace ``path``, creating parent directories."""
        self._check_open()
        p = self._abs(path)
        payload = data.encode() if isinstance(data, str) else bytes(data)
        rc, msg = self._transfer(
            'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"',
            [p, f"{mode:o}"],
            stdin=payload,
            out=Sink(4096),
        )
        if rc != 0:  # the sandbox refused the path (read-only, a directory there...), or failed
            error = SandboxError if rc is None else SandboxPathError
            raise error(f"writing {p!r} in {self!r} failed (exit {rc}): {msg}")

    def upload(self, local_dir: str | os.PathLike[str], remote_dir: str) -> None:
        """Copy the contents of a local directory into ``remote_dir`` (created if missing)."""
        self._check_open()
        src = Path(local_dir)
        if not src.is_dir():
            raise FileNotFoundError(f"upload: {src} is not a directory")
        bio = io.BytesIO()
        with tarfile.open(fileobj=bio, mode="w") as tar:
            for child in sorted(src.iterdir()):
                tar.add(child, arcname=child.name)
        p = self._abs(remote_dir)
        rc, msg = self._transfer(
            'mkdir -p "$1" && tar -x -m --no-same-owner -f - -C "$1"',
            [p],
            stdin=bio.getvalue(),
            out=Sink(4096),
        )
        if rc != 0:
            raise SandboxError(f"upload to {p!r} in {self!r} failed (exit {rc}): {msg}")

    def download(self, remote_dir: str, local_dir: str | os.PathLike[str]) -> None:
        """Copy the contents of ``remote_dir`` into a local directory (created if missing)."""
        self._check_open()
        p = self._abs(remote_dir)
        out = Sink(DOWNLOAD_MAX_BYTES, spool=True)
        rc, msg = self._transfer(
            '[ -d "$1" ] || exit 44; exec tar -c -f - -C "$1" .', [p], stdin=None, out=out
        )
        if rc == 44:
            raise SandboxFileNotFoundError(f"no directory {p!r} in {self!r}")
        if rc != 0 or out.overflow:
            raise SandboxError(f"download of {p!r} from {self!r} failed (exit {rc}): {msg or 'too large'}")
        dest = Path(local_dir)
        dest.mkdir(parents=True, exist_ok=True)
        out.buf.seek(0)
        with tarfile.open(fileobj=out.buf, mode="r:") as tar:
            tar.extractall(dest, filter="data")  # refuses absolute paths, .. and device files

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
