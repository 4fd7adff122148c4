"""Close every live sandbox at interpreter exit and on SIGTERM / SIGINT.

Sandboxes register themselves here; the handlers close whatever is still open. SIGTERM's
handler closes everything and then lets the previous handler (or the default action, death)
run. SIGINT keeps Python's ``KeyboardInterrupt`` (a caller may catch it and carry on): the
sandboxes close at exit when the interrupt ends the program. After ``kill -9`` nothing runs in
this process; the reaper removes its containers next time (``skyrl sandbox reap``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
import weakref
from typing import Any

__all__ = ["track", "untrack", "close_all"]

log = logging.getLogger(__name__)

_live: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.RLock()  # re-entrant: the SIGTERM handler may run while the main thread holds it
_installed_pid: int | None = None
_previous: dict[int, Any] = {}


def close_all() -> None:
    """Close every sandbox (and pool) this process still has open."""
    with _lock:
        items = list(_live)
    for item in items:
        try:
            item.close()
        except Exception as exc:  # cleanup must go on
            log.warning("closing %r failed: %s", item, exc)


def _on_signal(signum: int, frame: Any) -> None:
    close_all()
    prev = _previous.get(signum)
    if callable(prev):
        prev(signum, frame)
    elif prev == signal.SIG_IGN:
        return
    else:  # the default action: die by the same signal
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install() -> None:
    global _installed_pid
    if _installed_pid == os.getpid():
        return
    _installed_pid = os.getpid()
    atexit.register(close_all)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    with contextlib.suppress(ValueError, OSError):
        prev = signal.getsignal(signal.SIGTERM)
        if prev is not _on_signal:
            _previous[signal.SIGTERM] = prev
            signal.signal(signal.SIGTERM, _on_signal)
    with contextlib.suppress(ValueError, OSError):
        prev = signal.getsignal(signal.SIGINT)
        # Python's default raises KeyboardInterrupt and exit cleanup follows; keep it. Chain a
        # custom handler, and replace SIG_DFL (death without atexit).
        if prev is signal.SIG_DFL or (
            callable(prev) and prev not in (signal.default_int_handler, _on_signal)
        ):
            _previous[signal.SIGINT] = prev
            signal.signal(signal.SIGINT, _on_signal)


def track(item: Any) -> None:
    """Close ``item`` at exit or on SIGTERM unless it is closed before."""
    with _lock:
        _install()
        _live.add(item)


def untrack(item: Any) -> None:
    """Forget ``item`` (it was closed)."""
    with _lock:
        _live.discard(item)
