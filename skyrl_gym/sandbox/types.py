"""Data types of the sandbox layer: limits, exec results, the ``Sandbox`` protocol.

A sandbox runs commands that a model wrote. Its limits come from the env or task config, never
from the model: an env builds a :class:`SandboxLimits` and hands it to a backend, and the model
only ever supplies the command text.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Literal, Protocol, runtime_checkable

from skyrl_gym.errors import ConfigError, SandboxError

__all__ = [
    "GiB",
    "MiB",
    "SandboxLimits",
    "ExecResult",
    "EndReason",
    "Sandbox",
    "AsyncSandbox",
    "DockerProfile",
    "DockerSandboxConfig",
    "SandboxPathError",
    "SandboxFileNotFoundError",
    "SandboxNotAFileError",
    "SandboxFileTooLargeError",
    "SandboxSpec",
    "SandboxKind",
    "Command",
    "LocalIsolation",
    "LocalSandboxConfig",
]

MiB = 1024 * 1024
GiB = 1024 * MiB

#: A command: a shell string (run with ``/bin/sh -c``) or an argument vector (run as is).
Command = str | Sequence[str]

#: Where a sandbox runs: local processes, or a Docker container.
SandboxKind = Literal["local", "docker"]


class SandboxPathError(SandboxError):
    """The sandbox works, but refused a file operation because of the path or the file: it does
    not exist, is not a regular file, is too large, or could not be written there.

    A :class:`SandboxError`, so uncaught it masks the episode; a tool that got the path from the
    model catches it and raises the model's error instead (see
    :class:`~skyrl_gym.sandbox.TerminalTools`)."""


class SandboxFileNotFoundError(SandboxPathError, FileNotFoundError):
    """A file or directory asked for does not exist inside the sandbox."""


class SandboxNotAFileError(SandboxPathError):
    """``read_file`` was asked for something that is not a regular file (a directory...)."""


class SandboxFileTooLargeError(SandboxPathError):
    """A file is larger than the ``max_bytes`` the caller allowed."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandbox. Set by the env or task config, never by the model.

    Every field has a default; override the ones you need:
    ``SandboxLimits(timeout_s=5, memory_bytes=512 * MiB)``.
    """

    cpus: float = 1.0
    """CPU share (Docker CPU quota, in CPUs). The local backend caps CPU *time* per process at
    ``ceil(timeout_s * cpus) + grace_s`` seconds instead."""
    memory_bytes: int = 2 * GiB
    """Memory limit. Docker: memory with swap equal to memory (no swap); a process over it is
    OOM-killed. Local: address-space limit per process (allocations beyond it fail)."""
    pids: int = 512
    """Most processes (and threads) at once. Docker: pids cgroup; local: ``RLIMIT_NPROC``
    (enforced only when the sandbox runs under its own uid, see ``LocalSandbox``)."""
    timeout_s: float = 30.0
    """Default wall-clock deadline of one ``exec``; ``exec(..., timeout=...)`` may lower or raise it
    per call (the env decides, not the model)."""
    grace_s: float = 10.0
    """Seconds between SIGTERM and SIGKILL when a command runs past its deadline."""
    output_bytes: int = 1 * MiB
    """Most bytes kept of each of stdout and stderr; more is cut out of the middle and replaced
    by a marker, keeping the first and last halves."""
    file_size_bytes: int = 1 * GiB
    """Largest single file a command may write (``RLIMIT_FSIZE``)."""
    tmp_bytes: int = 256 * MiB
    """Size of the ``/tmp`` tmpfs (Docker strict profile; local backend under bubblewrap)."""
    workspace_bytes: int = 1 * GiB
    """Size of the ``/workspace`` tmpfs (Docker strict profile). Counts against memory."""
    ttl_s: float = 30 * 60
    """Most seconds a Docker container lives; the reaper removes it afterwards, and the
    container's own init exits then even when no reaper runs."""

    def __post_init__(self) -> None:
        for name in ("cpus", "timeout_s", "ttl_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.grace_s < 0:
            raise ConfigError(f"SandboxLimits.grace_s must be >= 0, got {self.grace_s!r}")
        for name in (
            "memory_bytes",
            "pids",
            "output_bytes",
            "file_size_bytes",
            "tmp_bytes",
            "workspace_bytes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"SandboxLimits.{name} must be a positive int, got {value!r}")
        if self.memory_bytes < 16 * MiB:
            raise ConfigError(f"SandboxLimits.memory_bytes={self.memory_bytes} is below 16 MiB; nothing runs")

    @classmethod
    def from_config(cls, cfg: Mapping[str, object] | None) -> SandboxLimits:
        """Build limits from a plain mapping (an env config section); unknown keys raise."""
        if not cfg:
            return cls()
        known = set(cls.__dataclass_fields__)
        unknown = set(cfg) - known
        if unknown:
            raise ConfigError(f"unknown sandbox limit(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**cfg)  # type: ignore[arg-type]


class EndReason(StrEnum):
    """Why a command ended (the most specific reason that applies)."""

    EXITED = "exited"
    TIMED_OUT = "timed_out"
    OOM_KILLED = "oom_killed"
    CPU_TIME_LIMIT = "cpu_time_limit"
    FILE_SIZE_LIMIT = "file_size_limit"
    SIGNALED = "signaled"


@dataclass(frozen=True)
class ExecResult:
    """What one command produced and why it ended. Never an exception for the model's doing."""

    stdout: str
    """Standard output, decoded as UTF-8 (invalid bytes replaced), middle-truncated to the cap."""
    stderr: str
    """Standard error, likewise."""
    exit_code: int
    """The exit status: the command's own, ``128 + N`` when killed by signal N, 124 when it
    timed out and ended on SIGTERM (137 when it needed SIGKILL)."""
    timed_out: bool = False
    """The command ran past its deadline and was killed (with everything it started)."""
    oom_killed: bool = False
    """The kernel killed the command for exceeding the memory limit (Docker backend)."""
    output_truncated: bool = False
    """stdout or stderr was longer than the cap; the middle was replaced with a marker."""
    signal: int | None = None
    """The signal that ended the command, if one did."""
    duration_s: float = 0.0
    """Wall-clock seconds from start to end."""
    stdout_bytes: int = 0
    """Bytes the command wrote to stdout in total (before truncation)."""
    stderr_bytes: int = 0
    """Bytes the command wrote to stderr in total (before truncation)."""

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0 within its deadline."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def reason(self) -> EndReason:
        """The most specific reason the command ended."""
        if self.timed_out:
            return EndReason.TIMED_OUT
        if self.oom_killed:
            return EndReason.OOM_KILLED
        if self.signal == signal.SIGXCPU:
            return EndReason.CPU_TIME_LIMIT
        if self.signal == signal.SIGXFSZ:
            return EndReason.FILE_SIZE_LIMIT
        if self.signal is not None:
            return EndReason.SIGNALED
        return EndReason.EXITED

    def describe(self) -> str:
        """A one-line summary for logs and observations, e.g. ``exit 0 in 0.05 s``."""
        parts = [f"exit {self.exit_code}"]
        if self.reason is not EndReason.EXITED:
            parts.append(self.reason.value.replace("_", " "))
        if self.output_truncated:
            parts.append("output truncated")
        return ", ".join(parts) + f" in {self.duration_s:.2f} s"


@runtime_checkable
class Sandbox(Protocol):
    """A place to run model-written commands, with limits, files and a clean end.

    Paths are POSIX paths inside the sandbox; relative paths are relative to ``workdir``.
    ``close()`` is idempotent; a sandbox is a context manager. Every blocking method has an
    ``a``-prefixed coroutine twin (``aexec``, ``aread_file``...) for the rollout engine.
    """

    workdir: str

    def exec(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` and return what happened; a limit hit is a flag, not an exception."""
        ...

    def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The bytes of a file (``SandboxFileNotFoundError`` if missing)."""
        ...

    def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Create or replace a file (parent directories are created)."""
        ...

    def upload(self, local_dir: str | os.PathLike[str], remote_dir: str) -> None:
        """Copy a local directory's contents into ``remote_dir`` (created if missing)."""
        ...

    def download(self, remote_dir: str, local_dir: str | os.PathLike[str]) -> None:
        """Copy ``remote_dir``'s contents into a local directory (created if missing)."""
        ...

    def close(self) -> None:
        """Stop everything and release all resources. Idempotent."""
        ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class AsyncSandbox(Protocol):
    """The coroutine face of a :class:`Sandbox` (every backend has both)."""

    async def aexec(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | str | None = None,
    ) -> ExecResult: ...

    async def aread_file(self, path: str, *, max_bytes: int | None = None) -> bytes: ...

    async def awrite_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None: ...

    async def aupload(self, local_dir: str | os.PathLike[str], remote_dir: str) -> None: ...

    async def adownload(self, remote_dir: str, local_dir: str | os.PathLike[str]) -> None: ...

    async def aclose(self) -> None: ...


class DockerProfile(StrEnum):
    """How tightly a Docker sandbox is locked down."""

    STRICT = "strict"
    """For model-written code and tool calls: network off, read-only root filesystem with a
    writable ``/workspace`` and ``/tmp`` (size-limited tmpfs), all capabilities dropped,
    ``no-new-privileges``, non-root user (``65534:65534``)."""
    TASK = "task"
    """For Harbor and SWE task containers: root with Docker's default capabilities, writable
    filesystem, ``no-new-privileges``, network only if the task asks (off by default)."""


@dataclass(frozen=True)
class DockerSandboxConfig:
    """How to create a Docker sandbox. Pickles; the container is built from it, never stored."""

    image: str = "skyrl-sandbox/python:latest"
    """Image to run; ``skyrl sandbox build-images`` builds the default offline."""
    profile: DockerProfile = DockerProfile.STRICT
    """Lock-down profile, see :class:`DockerProfile`."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    """Resource limits."""
    network: bool = False
    """Give the container a network (task profile only; the strict profile is always off)."""
    workdir: str = "/workspace"
    """Working directory of commands (a size-limited tmpfs in the strict profile)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables of every command (per-call ``env`` adds to them)."""
    user: str | None = None
    """Override the profile's user (``"uid:gid"``); ``None`` keeps the profile default."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra labels on the container (the ``skyrl.*`` labels are always added)."""
    pull: bool = False
    """Pull the image from a registry when it is missing (off: no registry is reachable on
    offline machines, and a missing image should fail at once with a hint)."""
    network_name: str | None = None
    """Task profile only: join this existing Docker network (a task-private one that the caller
    made and removes, e.g. a multi-container Harbor task's) instead of none or the bridge."""
    network_aliases: tuple[str, ...] = ()
    """Names the container answers to on ``network_name`` (e.g. ``main``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "profile", DockerProfile(self.profile))
        object.__setattr__(self, "network_aliases", tuple(self.network_aliases))
        if (self.network_name or self.network_aliases) and self.profile is DockerProfile.STRICT:
            raise ConfigError("the strict Docker profile never joins a network; use profile='task'")
        if self.network_aliases and not self.network_name:
            raise ConfigError("network_aliases need a network_name to be names on")
        if not str(PurePosixPath(self.workdir)).startswith("/"):
            raise ConfigError(f"DockerSandboxConfig.workdir must be absolute, got {self.workdir!r}")
        if self.network and self.profile is DockerProfile.STRICT:
            raise ConfigError(
                "the strict Docker profile never has a network; use profile='task' with network=True"
            )
        if any(k.startswith("skyrl.") for k in self.labels):
            raise ConfigError("labels starting with 'skyrl.' are reserved for the sandbox layer")


class LocalIsolation(StrEnum):
    """How the local backend isolates a command."""

    AUTO = "auto"
    """Bubblewrap when it is installed and works here, otherwise plain processes."""
    BWRAP = "bwrap"
    """Bubblewrap: own mount, pid, network, ipc, uts and user namespaces, no capabilities,
    only system directories (read-only) and the sandbox's workdir visible, a fresh ``/tmp``.
    Raises if bubblewrap is missing or cannot run here."""
    NONE = "none"
    """Plain processes: resource limits, own session, own uid when run as root, but the host's
    filesystem and network. Only for trusted code or machines that are themselves disposable."""


@dataclass(frozen=True)
class LocalSandboxConfig:
    """How to create a local-process sandbox. Pickles."""

    limits: SandboxLimits = field(default_factory=SandboxLimits)
    """Resource limits."""
    isolation: LocalIsolation = LocalIsolation.AUTO
    """Isolation mode, see :class:`LocalIsolation`."""
    network: bool = False
    """Keep the host network under bubblewrap (off by default; without bubblewrap a command
    always has the host's network)."""
    ro_paths: tuple[str, ...] = ()
    """Extra host paths visible read-only under bubblewrap (e.g. a virtual environment)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables of every command. Nothing else of the host environment leaks in
    except ``PATH`` (``HOME`` and ``TMPDIR`` point into the sandbox)."""
    base_dir: str | None = None
    """Where the sandbox's working directory is created (default: the system temp dir)."""
    own_uid: bool = True
    """When running as root, run commands as a fresh unprivileged uid of their own, which makes
    ``pids`` enforceable and lets cleanup find every process the sandbox started."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "isolation", LocalIsolation(self.isolation))
        object.__setattr__(self, "ro_paths", tuple(self.ro_paths))


@dataclass(frozen=True)
class SandboxSpec:
    """Which sandbox an env gets and how; :func:`~skyrl_gym.sandbox.make_sandbox` builds it.

    An env derives one from its config (the kind, limits and image are the env's, never the
    model's). Pickles; the sandbox is built from it, never stored in it. The Docker-only fields
    are ignored for ``kind="local"``.
    """

    kind: SandboxKind = "local"
    """``"local"``: a :class:`~skyrl_gym.sandbox.LocalSandbox`; ``"docker"``: a container."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    """Resource limits."""
    image: str = "skyrl-sandbox/python:latest"
    """Docker: the image to run (``skyrl sandbox build-images`` builds the default offline)."""
    profile: DockerProfile = DockerProfile.STRICT
    """Docker: ``strict`` for model-written code, ``task`` for task containers (Harbor, SWE)."""
    pool_size: int = 0
    """Docker: > 0 leases the container from a process-wide warm pool of this size, shared by
    every spec with the same container settings; closing the sandbox gives it back. 0 starts a
    fresh container."""
    workdir: str | None = None
    """Docker: the working directory (None: ``/workspace``). Local sandboxes always get a fresh
    directory of their own."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables of every command."""
    network: bool = False
    """A network (Docker: task profile only; local: under bubblewrap)."""
    user: str | None = None
    """Docker: the user (``"uid:gid"``); None keeps the profile's."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Docker: extra container labels."""
    ro_paths: tuple[str, ...] = ()
    """Local: extra host paths visible read-only under bubblewrap."""
    name_prefix: str = "skyrl-sbx"
    """Docker: the start of the container's name."""
    start_timeout_s: float | None = None
    """Docker: the container must be up within this many seconds, else
    :class:`~skyrl_gym.errors.SandboxTimeoutError` (a late container is removed when it comes
    up). None: no deadline."""
    network_name: str | None = None
    """Docker, task profile: join this existing network (see :class:`DockerSandboxConfig`)."""
    network_aliases: tuple[str, ...] = ()
    """Docker: the container's names on ``network_name``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "network_aliases", tuple(self.network_aliases))
        if self.kind not in ("local", "docker"):
            raise ConfigError(f"unknown sandbox {self.kind!r}; use 'local' or 'docker'")
        object.__setattr__(self, "profile", DockerProfile(self.profile))
        object.__setattr__(self, "ro_paths", tuple(self.ro_paths))
        if self.pool_size < 0 or (self.pool_size and self.kind != "docker"):
            raise ConfigError(f"pool_size={self.pool_size} needs kind='docker' and must be >= 0")
        if self.start_timeout_s is not None and not self.start_timeout_s > 0:
            raise ConfigError(f"start_timeout_s must be > 0 or None, got {self.start_timeout_s!r}")

    def docker_config(self) -> DockerSandboxConfig:
        """The :class:`DockerSandboxConfig` of a ``docker`` spec."""
        extra = {} if self.workdir is None else {"workdir": self.workdir}
        return DockerSandboxConfig(
            image=self.image,
            profile=self.profile,
            limits=self.limits,
            network=self.network,
            env=dict(self.env),
            user=self.user,
            labels=dict(self.labels),
            network_name=self.network_name,
            network_aliases=self.network_aliases,
            **extra,
        )

    def local_config(self) -> LocalSandboxConfig:
        """The :class:`LocalSandboxConfig` of a ``local`` spec."""
        return LocalSandboxConfig(
            limits=self.limits, network=self.network, ro_paths=self.ro_paths, env=dict(self.env)
        )
