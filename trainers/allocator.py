"""Which C allocator a ``skyrl train`` process runs on: glibc's ``malloc`` or jemalloc.

Torch's CPU tensors live on the C heap. A train step allocates and frees gigabytes of
activations of a few megabytes each, interleaved with the tensors the backward keeps; glibc's
heap then cannot reuse much of what was freed, and the process's resident size runs well above
what is in use. Measured on one micro-batch of the main job's shape (a 626-token prompt and 32
answers of 100 tokens, bf16 autocast, 2 cores; ``python bench/bench_allocator.py``, decision
0040): with activation checkpointing, 1.43 GB in use at the backward's peak against 3.71 GB
resident above the start under glibc, and 1.49 GB resident under jemalloc (7.48 GB against 5.82
GB in all without checkpointing). jemalloc's size classes and its purging of unused pages keep
the resident size near what is in use. It is not the default: the sampler ran 8-15% slower on
it (the main job's evaluation in ``bench/bench_generation.py --sections 1``), and the main job
1.18x longer in all (decision 0040).

The allocator of a process is chosen when it starts (``LD_PRELOAD``), so :func:`reexec` starts
the same command again with jemalloc preloaded, in the same process (``execve``: same PID, same
arguments, same environment plus ``LD_PRELOAD`` and ``MALLOC_CONF``). It is used by the
``skyrl train`` command line only; a program that calls :func:`trainers.loop.train` itself keeps
the allocator it was started with (start it with ``LD_PRELOAD=$(python -m trainers.allocator)``
for jemalloc).

jemalloc is looked for where Debian's ``libjemalloc2`` puts it and in the ``ray`` package (the
``ray`` extra ships one, built from jemalloc 5.3.0 with unprefixed symbols).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import sys
from pathlib import Path
from typing import Any

from skyrl_gym.errors import ConfigError

__all__ = ["ALLOCATORS", "find_jemalloc", "jemalloc_loaded", "purge", "reexec"]

logger = logging.getLogger(__name__)

#: The values of ``RunConfig.allocator``.
ALLOCATORS = ("auto", "jemalloc", "glibc")

#: Set in the process :func:`reexec` starts, so it never starts another.
_MARK = "SKYRL_ALLOCATOR_REEXEC"

#: jemalloc's settings when the user gave none: unused pages go back to the kernel about a second
#: after they are freed (10 s by default), straight away rather than through ``MADV_FREE``
#: (whose pages count as resident until the kernel needs them).
MALLOC_CONF = "dirty_decay_ms:1000,muzzy_decay_ms:0"

_SYSTEM_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/lib64/libjemalloc.so.2",
    "/usr/lib/libjemalloc.so.2",
    "/usr/local/lib/libjemalloc.so.2",
)


def find_jemalloc() -> str | None:
    """The path of a jemalloc shared library on this machine (the system's, else the one the
    ``ray`` package ships), or ``None``. ``ray`` is not imported."""
    for path in _SYSTEM_PATHS:
        if os.path.isfile(path):
            return path
    try:
        spec = importlib.util.find_spec("ray")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "core" / "libjemalloc.so"
        if bundled.is_file():
            return str(bundled)
    return None


def jemalloc_loaded() -> bool:
    """Whether this process runs on jemalloc (a ``jemalloc`` library mapped into it)."""
    try:
        with open("/proc/self/maps") as f:
            return any("jemalloc" in line for line in f)
    except OSError:
        return False


def reexec(allocator: str) -> None:
    """Start this process's command again with jemalloc preloaded when ``allocator`` asks for it
    (``auto``: when one is found; ``jemalloc``: a :class:`ConfigError` naming the fix when none
    is) and this process does not run on it yet. Returns when there is nothing to do (``glibc``,
    already on jemalloc, ``auto`` without one, or a start that already tried)."""
    if allocator not in ALLOCATORS:
        raise ConfigError(f"allocator must be one of {', '.join(ALLOCATORS)}, got {allocator!r}")
    if allocator == "glibc" or jemalloc_loaded():
        return
    if os.environ.get(_MARK):  # the preload did not take (the loader said why on stderr)
        if allocator == "jemalloc":
            raise ConfigError(
                f"--allocator jemalloc: {os.environ.get('LD_PRELOAD')} was preloaded but is not mapped "
                "into the process; use --allocator glibc"
            )
        logger.warning("jemalloc could not be preloaded; running on glibc's malloc")
        return
    path = find_jemalloc()
    if path is None:
        if allocator == "jemalloc":
            raise ConfigError(
                "--allocator jemalloc: no jemalloc found (install Debian's libjemalloc2, or the ray "
                "extra, which ships one); or use --allocator glibc"
            )
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(p for p in (path, env.get("LD_PRELOAD", "")) if p)
    env.setdefault("MALLOC_CONF", MALLOC_CONF)
    env[_MARK] = "1"
    argv = list(getattr(sys, "orig_argv", []) or [sys.executable, *sys.argv])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]], env)


_mallctl: Any = None


def purge() -> bool:
    """Hand jemalloc's unused pages of every arena back to the kernel now
    (``mallctl("arena.<all>.purge")``); ``False`` when the process does not run on jemalloc."""
    global _mallctl
    if _mallctl is None:
        _mallctl = False
        if jemalloc_loaded():
            try:
                fn = ctypes.CDLL(None).mallctl
                fn.argtypes = [
                    ctypes.c_char_p,
                    ctypes.c_void_p,
                    ctypes.c_void_p,
                    ctypes.c_void_p,
                    ctypes.c_size_t,
                ]
                fn.restype = ctypes.c_int
                _mallctl = fn
            except (OSError, AttributeError):
                pass
    if not _mallctl:
        return False
    return _mallctl(b"arena.4096.purge", None, None, None, 0) == 0  # 4096: MALLCTL_ARENAS_ALL


if __name__ == "__main__":  # the path to preload: LD_PRELOAD=$(python -m trainers.allocator) python my_run.py
    found = find_jemalloc()
    if found is None:
        sys.exit("no jemalloc found: install Debian's libjemalloc2 or the ray extra")
    print(found)
