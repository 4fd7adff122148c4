"""Release the calling thread's OpenMP workers, so that torch on another thread gets the cores.

torch's CPU kernels run on OpenMP, and OpenMP keeps one team of worker threads per thread that
starts parallel work. A process where two threads compute (the trainer on the main thread, the
inference engine on its own) ends up with two teams: 2 + 2 threads on a 2-core machine. GNU
libgomp then sees more of its threads than cores and makes every barrier sleep on a futex
instead of spinning, and the engine's matrix products ran at one core's speed: the bundled
model's linear layers for 24 rows took 43 ms a step on the engine's thread after the main
thread had computed once, against 25 ms when only one team existed (``bench/bench_openmp.py``;
idle teams that spin, ``OMP_WAIT_POLICY=active``, were slower still, 51 ms).

``omp_pause_resource_all`` (OpenMP 5.0; libgomp, LLVM's libomp and Intel's libiomp have it)
frees the calling thread's team; its next parallel region starts a new one (tens of
microseconds). The engine calls :func:`release_openmp_workers` on its thread before it goes
idle and on each thread that submits a request, so at any time only the thread that computes
holds workers. Where no OpenMP runtime is loaded (or it lacks the call) this is a no-op.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any

__all__ = ["openmp_runtime", "release_openmp_workers"]

#: ``omp_pause_soft``: free the threads, keep what the runtime needs to start again.
_OMP_PAUSE_SOFT = 1
_RUNTIME_NAMES = ("libgomp", "libomp", "libiomp5")
_lock = threading.Lock()
_runtime: list[Any] = []  # [] not looked up yet; [None] none found; [func] omp_pause_resource_all


def _find_runtime() -> Any:
    """``omp_pause_resource_all`` of the OpenMP runtime this process has loaded (torch's), or
    None. Looked up by the loaded file's path (``/proc/self/maps``) so that it is the same copy
    torch uses, not a second one from the system."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:  # not Linux
        return None
    torch_dir = getattr(sys.modules.get("torch"), "__file__", None) or ""
    torch_dir = torch_dir.rsplit("/", 1)[0]
    # torch's own copy first (a wheel ships one; another copy may be loaded by other libraries)
    for path in sorted(paths, key=lambda p: (not (torch_dir and p.startswith(torch_dir)), p)):
        name = path.rsplit("/", 1)[-1]
        if name.startswith(_RUNTIME_NAMES) and ".so" in name:
            try:
                func = ctypes.CDLL(path).omp_pause_resource_all
            except (OSError, AttributeError):
                continue
            func.argtypes, func.restype = [ctypes.c_int], ctypes.c_int
            return func
    return None


def openmp_runtime() -> Any:
    """The pause function found (None when there is none); looked up once torch is imported
    (which loads the runtime)."""
    with _lock:
        if _runtime:
            return _runtime[0]
        func = _find_runtime()
        if func is not None or "torch" in sys.modules:
            _runtime.append(func)
        return func


def release_openmp_workers() -> bool:
    """Free the calling thread's OpenMP worker threads (they come back at its next parallel
    torch call). Returns whether the runtime did it. Never call it inside a parallel region."""
    func = openmp_runtime()
    return func is not None and func(_OMP_PAUSE_SOFT) == 0
