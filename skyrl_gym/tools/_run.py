"""Running one tool function under a deadline, from sync or async code.

* A sync function with a deadline runs in a fresh daemon thread; the caller waits at most the
  deadline. Python cannot kill a thread: a function that overruns keeps running in the
  background until it returns (its result is then dropped). Tools that run untrusted or
  CPU-heavy code must do it in a sandbox (a subprocess or container with its own limits).
* A sync function without a deadline runs on the caller's thread (needed, for example, for
  ``sqlite3`` connections, which only work on the thread that made them).
* An async function runs as a task; at the deadline it is cancelled.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Outcome", "run_sync", "run_async", "arun_sync", "arun_async"]

CANCEL_GRACE_S = 1.0
"""How long a cancelled async tool may take to clean up before it is abandoned."""


@dataclass(frozen=True)
class Outcome:
    """How one run ended."""

    status: Literal["ok", "error", "timeout"]
    value: Any = None
    exception: BaseException | None = None


def _call(fn: Callable[[], Any]) -> Outcome:
    try:
        return Outcome("ok", fn())
    except (Exception, SystemExit) as exc:  # SystemExit: a tool that calls exit() is still a tool error
        return Outcome("error", exception=exc)


def run_sync(fn: Callable[[], Any], timeout: float | None, *, in_thread: bool = False) -> Outcome:
    """Run ``fn`` (sync) and wait at most ``timeout`` seconds. With ``timeout=None`` it runs inline
    (no deadline), unless ``in_thread`` asks for a worker thread anyway."""
    if timeout is None and not in_thread:
        return _call(fn)
    box: list[Outcome] = []
    done = threading.Event()

    def target() -> None:
        try:
            box.append(_call(fn))
        except BaseException as exc:  # noqa: BLE001 - anything left must not kill the thread silently
            box.append(Outcome("error", exception=exc))
        finally:
            done.set()

    threading.Thread(target=target, name="skyrl-tool", daemon=True).start()
    if not done.wait(timeout):
        return Outcome("timeout")
    return box[0]


def run_async(factory: Callable[[], Awaitable[Any]], timeout: float | None) -> Outcome:
    """Run the coroutine made by ``factory`` to completion from sync code, with a deadline.

    With no event loop running in this thread it runs here with ``asyncio.run``; inside a running
    loop (sync code called from async code) it runs on a fresh loop in a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        outcome = _call(lambda: asyncio.run(arun_async(factory, timeout)))
    else:
        # A running loop in this thread cannot be re-entered: use a fresh loop in another thread.
        outer = None if timeout is None else timeout + CANCEL_GRACE_S + 1.0
        outcome = run_sync(lambda: asyncio.run(arun_async(factory, timeout)), outer, in_thread=True)
    return outcome.value if outcome.status == "ok" else outcome


async def arun_async(factory: Callable[[], Awaitable[Any]], timeout: float | None) -> Outcome:
    """Await the coroutine made by ``factory``; cancel it at the deadline."""
    try:
        task = asyncio.ensure_future(factory())
    except (Exception, SystemExit) as exc:
        return Outcome("error", exception=exc)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
        return Outcome("timeout")
    if task.cancelled():
        return Outcome("error", exception=asyncio.CancelledError("the tool cancelled itself"))
    exc = task.exception()
    if exc is not None:
        if not isinstance(exc, (Exception, SystemExit)):
            raise exc
        return Outcome("error", exception=exc)
    return Outcome("ok", task.result())


async def arun_sync(fn: Callable[[], Any], timeout: float | None) -> Outcome:
    """Run a sync ``fn`` from async code: in a daemon thread with a deadline, or inline without one."""
    if timeout is None:
        return _call(fn)
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Outcome] = loop.create_future()

    def deliver(outcome: Outcome) -> None:
        if not fut.done():
            fut.set_result(outcome)

    def target() -> None:
        try:
            outcome = _call(fn)
        except BaseException as exc:  # noqa: BLE001
            outcome = Outcome("error", exception=exc)
        try:
            loop.call_soon_threadsafe(deliver, outcome)
        except RuntimeError:  # the loop closed while the tool overran: nobody is waiting
            pass

    threading.Thread(target=target, name="skyrl-tool", daemon=True).start()
    try:
        return await asyncio.wait_for(asyncio.shield(fut), timeout)
    except TimeoutError:
        return Outcome("timeout")
