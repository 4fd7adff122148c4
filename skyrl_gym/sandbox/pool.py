"""A pool of warm Docker sandboxes: an episode gets a running container at once.

The pool keeps ``size`` sandboxes, leased or warm (set it to the number of episodes that run at
once, plus a few). ``acquire`` hands out a warm sandbox, or starts one cold when none is ready;
``release`` resets it in the background (every process killed, ``/workspace``, ``/tmp`` and
``/dev/shm`` emptied) and makes it warm again, or replaces it when a reset is not possible
(task profile: the task changed the filesystem; a dead container) or when the pool holds more
than ``size``. A filler thread starts new sandboxes whenever the pool holds fewer than
``size``. Sandboxes close to their time-to-live are replaced instead of handed out. ``close``
removes every container the pool made, leased ones included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from skyrl_gym.errors import ConfigError, SandboxError, SandboxTimeoutError
from skyrl_gym.sandbox import _cleanup
from skyrl_gym.sandbox._base import run_blocking
from skyrl_gym.sandbox.docker import DockerSandbox
from skyrl_gym.sandbox.dockerlib import docker_client
from skyrl_gym.sandbox.types import DockerSandboxConfig

__all__ = ["SandboxPool"]

log = logging.getLogger(__name__)

#: A warm sandbox with less than this share of its time-to-live left is replaced, not leased.
MIN_LIFE_LEFT = 0.25


class SandboxPool:
    """Keeps ``size`` Docker sandboxes of one config warm.

    >>> with SandboxPool(DockerSandboxConfig(), size=2) as pool:
    ...     with pool.sandbox() as sb:
    ...         sb.exec("echo hi").stdout
    'hi\\n'
    """

    def __init__(
        self, config: DockerSandboxConfig | None = None, size: int = 4, *, client: Any = None
    ) -> None:
        if size < 0:
            raise ConfigError(f"pool size must be >= 0, got {size}")
        self.config = config or DockerSandboxConfig()
        self.size = size
        self.client = client or docker_client()
        self._warm: deque[tuple[DockerSandbox, float]] = deque()  # (sandbox, created at)
        self._leased: set[DockerSandbox] = set()
        self._creating = 0
        self._recycling: set[DockerSandbox] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._failures = 0
        self._workers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="skyrl-pool-reset")
        self._filler = threading.Thread(target=self._fill_loop, name="skyrl-pool-fill", daemon=True)
        _cleanup.track(self)
        self._filler.start()

    # -- warm sandboxes ----------------------------------------------------------------------
    def _new(self) -> DockerSandbox:
        return DockerSandbox(self.config, client=self.client, name_prefix="skyrl-pool")

    def _fill_loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and self._held() >= self.size:
                    self._cond.wait()
                if self._closed:
                    return
                self._creating += 1
            sb = None
            try:
                sb = self._new()
                self._failures = 0
            except SandboxError as exc:
                self._failures += 1
                log.warning("pool could not start a sandbox (%d in a row): %s", self._failures, exc)
            with self._cond:
                self._creating -= 1
                if sb is not None and not self._closed:
                    self._warm.append((sb, time.monotonic()))
                    sb = None
                self._cond.notify_all()
            if sb is not None:  # the pool closed meanwhile
                sb.close()
            if self._failures:
                time.sleep(min(30.0, 0.5 * 2 ** min(self._failures, 6)))

    def _held(self) -> int:
        """Sandboxes the pool holds or will hold soon (call with the lock held)."""
        return len(self._warm) + len(self._leased) + self._creating + len(self._recycling)

    def _fresh_enough(self, created: float) -> bool:
        return time.monotonic() - created < self.config.limits.ttl_s * (1 - MIN_LIFE_LEFT)

    @property
    def warm_count(self) -> int:
        """Sandboxes ready to hand out now."""
        with self._cond:
            return len(self._warm)

    def wait_warm(self, count: int | None = None, timeout: float = 120.0) -> None:
        """Block until ``count`` (default: ``size``) sandboxes are warm."""
        want = self.size if count is None else count
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._warm) < want:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise SandboxTimeoutError(
                        f"pool has {len(self._warm)} of {want} warm sandboxes after {timeout} s"
                    )
                self._cond.wait(timeout=min(left, 1.0))

    # -- lease -------------------------------------------------------------------------------
    def acquire(self) -> DockerSandbox:
        """A ready sandbox: a warm one if any, else a new one started now."""
        stale = []
        with self._cond:
            if self._closed:
                raise SandboxError("the sandbox pool is closed")
            sb = None
            while self._warm:
                cand, created = self._warm.popleft()
                if self._fresh_enough(created) and not cand.closed:
                    sb = cand
                    self._leased.add(sb)  # in the same step, so the filler never counts it missing
                    break
                stale.append(cand)
            self._cond.notify_all()  # the filler tops up if the pool now holds too few
        for old in stale:
            self._workers.submit(old.close)
        if sb is not None and not sb.alive():  # killed or reaped while it waited (one inspect call)
            with self._cond:
                self._leased.discard(sb)
                self._cond.notify_all()
            self._workers.submit(sb.close)
            sb = None
        if sb is None:
            sb = self._new()
            with self._cond:
                closed = self._closed
                if not closed:
                    self._leased.add(sb)
            if closed:
                sb.close()
                raise SandboxError("the sandbox pool was closed while a sandbox was starting")
        return sb

    def release(self, sb: DockerSandbox) -> None:
        """Give a sandbox back: it is reset (or replaced) in the background."""
        with self._cond:
            if sb not in self._leased:
                raise SandboxError(f"{sb!r} was not leased from this pool (or was released twice)")
            self._leased.discard(sb)
            closed = self._closed
            if not closed:
                self._recycling.add(sb)
        if closed or sb.closed:
            sb.close()
            return
        try:
            self._workers.submit(self._recycle, sb)
        except RuntimeError:  # the pool shut down meanwhile
            sb.close()

    def _recycle(self, sb: DockerSandbox) -> None:
        ok = False
        try:
            ok = sb.reset()
        finally:
            with self._cond:
                self._recycling.discard(sb)
                keep = ok and not self._closed and self._held() < self.size
                if keep:  # keeps its original creation time for the time-to-live check
                    self._warm.append((sb, time.monotonic() - (time.time() - _created_at(sb))))
                self._cond.notify_all()
            if not keep:
                sb.close()

    @contextlib.contextmanager
    def sandbox(self) -> Iterator[DockerSandbox]:
        """``with pool.sandbox() as sb:`` acquire, and release at the end."""
        sb = self.acquire()
        try:
            yield sb
        finally:
            self.release(sb)

    async def aacquire(self) -> DockerSandbox:
        """Coroutine twin of :meth:`acquire`."""
        return await run_blocking(self.acquire)

    async def arelease(self, sb: DockerSandbox) -> None:
        """Coroutine twin of :meth:`release`."""
        await run_blocking(self.release, sb)

    @contextlib.asynccontextmanager
    async def asandbox(self) -> AsyncIterator[DockerSandbox]:
        """``async with pool.asandbox() as sb:``"""
        sb = await self.aacquire()
        try:
            yield sb
        finally:
            await self.arelease(sb)

    # -- end ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Remove every sandbox of the pool, leased ones included. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            items = [sb for sb, _ in self._warm] + list(self._leased)
            self._warm.clear()
            self._leased.clear()
            self._cond.notify_all()
        _cleanup.untrack(self)
        self._workers.shutdown(wait=True, cancel_futures=True)
        self._filler.join(timeout=60)
        with self._cond:  # resets that were cancelled before they ran
            items += list(self._recycling)
            self._recycling.clear()
        for sb in items:
            sb.close()

    async def aclose(self) -> None:
        """Coroutine twin of :meth:`close`."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SandboxPool(size={self.size}, warm={self.warm_count}, leased={len(self._leased)})"


def _created_at(sb: DockerSandbox) -> float:
    try:
        return float(sb.container.labels.get("skyrl.created", time.time()))
    except (TypeError, ValueError):
        return time.time()
