"""Sandboxes: where model-written code and commands run.

One protocol, :class:`Sandbox` (``exec``, ``read_file``, ``write_file``, ``upload``,
``download``, ``close``; async twins ``aexec``...), with two backends:

- :class:`LocalSandbox`: local processes with rlimits, an own uid (as root), whole-tree kill,
  and bubblewrap namespaces where available.
- :class:`DockerSandbox`: a container per sandbox, *strict* or *task* profile, with a warm
  :class:`SandboxPool` and a :func:`reap` er for leftovers.

Limits (:class:`SandboxLimits`) come from the env config, never from the model. The Docker
parts import the ``docker`` SDK only when a container is made (the ``docker`` extra).
"""

from skyrl_gym.errors import SandboxError, SandboxTimeoutError
from skyrl_gym.sandbox.docker import DockerSandbox
from skyrl_gym.sandbox.local import LocalSandbox, bwrap_usable
from skyrl_gym.sandbox.pool import SandboxPool
from skyrl_gym.sandbox.reaper import reap
from skyrl_gym.sandbox.types import (
    AsyncSandbox,
    Command,
    DockerProfile,
    DockerSandboxConfig,
    EndReason,
    ExecResult,
    GiB,
    LocalIsolation,
    LocalSandboxConfig,
    MiB,
    Sandbox,
    SandboxFileNotFoundError,
    SandboxLimits,
)

__all__ = [
    "AsyncSandbox",
    "Command",
    "DockerProfile",
    "DockerSandbox",
    "DockerSandboxConfig",
    "EndReason",
    "ExecResult",
    "GiB",
    "LocalIsolation",
    "LocalSandbox",
    "LocalSandboxConfig",
    "MiB",
    "Sandbox",
    "SandboxError",
    "SandboxFileNotFoundError",
    "SandboxLimits",
    "SandboxPool",
    "SandboxTimeoutError",
    "bwrap_usable",
    "reap",
]
