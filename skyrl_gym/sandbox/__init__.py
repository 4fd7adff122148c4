"""Sandboxes: where model-written code and commands run.

One protocol, :class:`Sandbox` (``exec``, ``read_file``, ``write_file``, ``upload``,
``download``, ``close``; async twins ``aexec``...), with two backends:

- :class:`LocalSandbox`: local processes with rlimits, an own uid (as root), whole-tree kill,
  and bubblewrap namespaces where available.
- :class:`DockerSandbox`: a container per sandbox, *strict* or *task* profile, with a warm
  :class:`SandboxPool` and a :func:`reap` er for leftovers.

One way to get one: :func:`make_sandbox` builds what a :class:`SandboxSpec` says (local, Docker
strict or task profile, or a lease from a shared warm pool). Limits (:class:`SandboxLimits`)
come from the env config, never from the model. The Docker parts import the ``docker`` SDK only
when a container is made (the ``docker`` extra).

:class:`TerminalTools` is the tool group of envs where a model works in a sandbox of its own
(``bash``, file tools, ``submit``); :class:`~skyrl_gym.sandbox.python_tool.PythonTool` runs
model-written Python.
"""

from skyrl_gym.errors import SandboxError, SandboxTimeoutError
from skyrl_gym.sandbox._make import PooledSandbox, close_shared_pools, make_sandbox, shared_pool
from skyrl_gym.sandbox.docker import DockerSandbox
from skyrl_gym.sandbox.local import LocalSandbox, bwrap_usable
from skyrl_gym.sandbox.pool import SandboxPool
from skyrl_gym.sandbox.reaper import reap
from skyrl_gym.sandbox.terminal import TerminalSettings, TerminalTools, Workspace
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
    SandboxFileTooLargeError,
    SandboxKind,
    SandboxLimits,
    SandboxNotAFileError,
    SandboxPathError,
    SandboxSpec,
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
    "PooledSandbox",
    "Sandbox",
    "SandboxError",
    "SandboxFileNotFoundError",
    "SandboxFileTooLargeError",
    "SandboxKind",
    "SandboxLimits",
    "SandboxNotAFileError",
    "SandboxPathError",
    "SandboxPool",
    "SandboxSpec",
    "SandboxTimeoutError",
    "TerminalSettings",
    "TerminalTools",
    "Workspace",
    "bwrap_usable",
    "close_shared_pools",
    "make_sandbox",
    "reap",
    "shared_pool",
]
