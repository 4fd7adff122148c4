"""Process-wide warm Docker pools shared by code envs of the same image and limits.

Made on first use (never at import), closed at interpreter exit by the sandbox layer's cleanup
or by :func:`close_shared_pools`.
"""

from __future__ import annotations

import threading

from skyrl_gym.sandbox.pool import SandboxPool
from skyrl_gym.sandbox.types import DockerSandboxConfig, SandboxLimits

_lock = threading.Lock()
_pools: dict[tuple[str, SandboxLimits], SandboxPool] = {}


def shared_pool(image: str, limits: SandboxLimits, size: int) -> SandboxPool:
    """The pool for ``(image, limits)``, made with ``size`` warm sandboxes if it does not exist."""
    key = (image, limits)
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = SandboxPool(DockerSandboxConfig(image=image, limits=limits), size=size)
        return pool


def close_shared_pools() -> None:
    """Close every shared pool (their containers are removed, leased ones included)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()
