"""A thread pool for env calls made from an event loop, with less overhead per call than
``loop.run_in_executor`` (which the rollout engine spent about a third of its CPU time on at 256
concurrent episodes).

``run_in_executor`` wraps a ``concurrent.futures.Future`` (a lock and a condition each) in an
asyncio future and wakes the event loop once per finished call (a self-pipe write each). Here
a call is an asyncio future and a tuple on a queue; finished calls are collected in a deque and
the loop is woken once per batch of them. Semantics are those of an executor: a call runs in a
worker thread, its result or exception lands on the future, a cancelled future's result is
dropped (the thread cannot be stopped; it finishes on its own). Threads are daemons, so an env
call stuck forever never blocks interpreter exit.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["LoopThreadPool", "run_in"]


class LoopThreadPool:
    """At most ``max_workers`` threads running calls for the event loop ``loop``.

    Create and use it on the loop's thread; ``close()`` stops the idle workers (calls still
    running finish on their own)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_workers: int, name: str = "skyrl-env") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.loop = loop
        self.max_workers = max_workers
        self.name = name
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._done: collections.deque[tuple[asyncio.Future[Any], bool, Any]] = collections.deque()
        self._lock = threading.Lock()
        self._wakeup_pending = False
        self._threads: list[threading.Thread] = []
        self._idle = 0  # workers waiting for work (written under the lock)
        self._closed = False
        self._deadlines: list[tuple[float, int, asyncio.Future[Any]]] = []  # a heap
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = 0.0

    def submit(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> asyncio.Future[Any]:
        """Run ``fn(*args)`` in a worker thread; returns an asyncio future of its result.

        With ``timeout`` (seconds), the future fails with ``TimeoutError`` when the call has not
        finished by then (the call itself runs on; its result is dropped). One timer serves all
        calls, instead of an ``asyncio.timeout`` (a timer handle) per call."""
        if self._closed:
            raise RuntimeError("the thread pool is closed")
        fut = self.loop.create_future()
        if timeout is not None:
            self._add_deadline(fut, self.loop.time() + timeout)
        self._work.put((fut, fn, args))
        if self._idle <= 0 and len(self._threads) < self.max_workers:
            t = threading.Thread(target=self._worker, name=f"{self.name}-{len(self._threads)}", daemon=True)
            self._threads.append(t)
            t.start()
        return fut

    def _worker(self) -> None:
        work, done, lock = self._work, self._done, self._lock
        while True:
            with lock:
                self._idle += 1
            item = work.get()
            with lock:
                self._idle -= 1
            if item is None:
                return
            fut, fn, args = item
            if fut.done():  # abandoned before it started (cancelled, or its deadline passed)
                continue
            try:
                result, ok = fn(*args), True
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                result, ok = exc, False
            with lock:
                done.append((fut, ok, result))
                wake = not self._wakeup_pending
                self._wakeup_pending = True
            if wake:
                try:
                    self.loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop is closed: nobody waits for the result
                    return

    def _deliver(self) -> None:
        with self._lock:
            batch = list(self._done)
            self._done.clear()
            self._wakeup_pending = False
        for fut, ok, result in batch:
            if fut.done():  # cancelled, or failed at its deadline: the late result is dropped
                continue
            if ok:
                fut.set_result(result)
            else:
                fut.set_exception(result)

    # ------------------------------------------------------------------ deadlines
    def _add_deadline(self, fut: asyncio.Future[Any], when: float) -> None:
        heapq.heappush(self._deadlines, (when, next(self._seq), fut))
        if len(self._deadlines) > 1024 and len(self._deadlines) > 4 * (
            len(self._threads) + self._work.qsize()
        ):
            # drop finished calls' entries now and then (they are otherwise dropped when due)
            self._deadlines = [d for d in self._deadlines if not d[2].done()]
            heapq.heapify(self._deadlines)
        if self._timer is None or when < self._timer_when:
            self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._deadlines and self._deadlines[0][2].done():
            heapq.heappop(self._deadlines)
        if self._deadlines:
            self._timer_when = self._deadlines[0][0]
            self._timer = self.loop.call_at(self._timer_when, self._expire)

    def _expire(self) -> None:
        self._timer = None
        now = self.loop.time()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, fut = heapq.heappop(self._deadlines)
            if not fut.done():
                fut.set_exception(TimeoutError())
        self._arm()

    def close(self) -> None:
        """Stop the workers once they are idle (idempotent); queued calls not yet started are
        dropped."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while True:  # drop what has not started
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in self._threads:
            self._work.put(None)


def run_in(executor: Any, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """``fn(*args)`` in ``executor``: a :class:`LoopThreadPool`, a ``concurrent.futures``
    executor, or None (the event loop's default executor)."""
    if isinstance(executor, LoopThreadPool):
        return executor.submit(fn, *args)
    return asyncio.get_running_loop().run_in_executor(executor, fn, *args)
