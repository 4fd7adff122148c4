"""The Docker backend: one container per sandbox, driven through the ``docker`` SDK.

Two profiles (:class:`DockerProfile`): *strict* for model-written code (no network, read-only
root with tmpfs ``/workspace`` and ``/tmp``, no capabilities, ``no-new-privileges``, uid 65534)
and *task* for Harbor/SWE containers (root with Docker's default capabilities, writable
filesystem, ``no-new-privileges``, network only if asked). Both: memory with swap equal to
memory, pids limit, CPU quota, file-size ulimit, labels for the reaper.

Every command runs under ``timeout -k GRACE DEADLINE`` inside the container, in a process group
of its own that is killed as a whole when the command ends, so background children (``sleep
inf &``) neither keep the exec open nor outlive it. A client-side deadline (deadline + grace +
a few seconds) is the backstop. Output is read from the exec's socket into bounded buffers.
Files move through ``cat`` and ``tar`` over the exec's stdin and stdout (see ``_base``), which
also works on a read-only root filesystem with tmpfs mounts (where ``docker cp`` does not).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from skyrl_gym.errors import ConfigError, SandboxError
from skyrl_gym.sandbox import _cleanup
from skyrl_gym.sandbox._base import TRANSFER_TIMEOUT_S, BaseSandbox, Sink
from skyrl_gym.sandbox._output import HeadTail
from skyrl_gym.sandbox.dockerlib import docker_client, docker_module
from skyrl_gym.sandbox.reaper import owner_labels, reap
from skyrl_gym.sandbox.types import (
    Command,
    DockerProfile,
    DockerSandboxConfig,
    ExecResult,
    SandboxFileNotFoundError,
    SandboxLimits,
)

__all__ = ["DockerSandbox", "STRICT_USER"]

log = logging.getLogger(__name__)

#: The strict profile's user: ``nobody:nogroup`` on Debian; needs no passwd entry.
STRICT_USER = "65534:65534"
#: Seconds a client waits beyond a command's deadline and grace before it gives up on the exec.
BACKSTOP_S = 5.0

# PID 1 of every container: a shell that reaps orphans (a shell waiting for a child reaps any
# child) and exits when the time-to-live runs out, which stops the container even when no reaper
# ever runs. Where the image has bash, bash keeps it: a fork that fails because a fork bomb
# filled the pids limit is retried and the loop goes on (dash exits on a failed fork, which
# stopped the container), and the clock is a builtin (``printf %(%s)T``), not a fork of ``date``.
# ``kill -KILL -1`` inside the container spares PID 1.
_KEEPER_BASH = (
    'trap "exit 0" TERM; printf -v end "%(%s)T" -1; end=$((end + {ttl})); '
    'while printf -v now "%(%s)T" -1; [ "$now" -lt "$end" ]; do sleep 30 & wait $!; done'
)
_KEEPER_SH = (
    'trap "exit 0" TERM; end=$(( $(date +%s) + {ttl} )); '
    'while [ "$(date +%s)" -lt "$end" ]; do sleep 30 & wait $!; done'
)
_KEEPER = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; fi; eval "$2"'
# The command wrapper: ``timeout`` puts itself and the command in a new process group (and
# kills the group on timeout); whatever of that group is left when the command ends is killed.
_WRAP_STDIN = (
    'g=$1 t=$2; shift 2; exec 3<&0; timeout -k "$g" "$t" "$@" <&3 3<&- & p=$!; exec 3<&-; '
    "wait $p; rc=$?; kill -KILL -$p 2>/dev/null; exit $rc"
)
_WRAP = (
    'g=$1 t=$2; shift 2; timeout -k "$g" "$t" "$@" </dev/null & p=$!; '
    "wait $p; rc=$?; kill -KILL -$p 2>/dev/null; exit $rc"
)
_RESET = (
    "kill -KILL -1 2>/dev/null; sleep 0.05; kill -KILL -1 2>/dev/null; "
    'for d in "$@"; do [ -d "$d" ] || continue; chmod -R u+rwX "$d" 2>/dev/null; '
    'rm -rf "$d"/* "$d"/.[!.]* "$d"/..?* 2>/dev/null; [ -z "$(ls -A "$d")" ] || exit 1; done'
)
_OOM_COUNT = (
    "if [ -r /sys/fs/cgroup/memory/memory.oom_control ]; then f=/sys/fs/cgroup/memory/memory.oom_control; "
    'else f=/sys/fs/cgroup/memory.events; fi; while read k v; do [ "$k" = oom_kill ] && echo $v; done < $f'
)

_reaped_in: int | None = None
_reap_lock = threading.Lock()


def _reap_once(client: Any) -> None:
    """Run the reaper once per process, when it first creates a Docker sandbox."""
    global _reaped_in
    with _reap_lock:
        if _reaped_in == os.getpid():
            return
        _reaped_in = os.getpid()
    try:
        reap(client)
    except Exception as exc:  # the reaper must never stop work
        log.warning("sandbox reaper failed: %s", exc)


class DockerSandbox(BaseSandbox):
    """A sandbox in a Docker container of its own.

    >>> with DockerSandbox(DockerSandboxConfig(limits=SandboxLimits(timeout_s=5))) as sb:
    ...     sb.exec("python3 -c 'print(6 * 7)'").stdout
    '42\\n'
    """

    def __init__(
        self,
        config: DockerSandboxConfig | None = None,
        *,
        client: Any = None,
        name_prefix: str = "skyrl-sbx",
    ) -> None:
        self.config = config or DockerSandboxConfig()
        self.limits: SandboxLimits = self.config.limits
        self.workdir = self.config.workdir
        self.client = client or docker_client()
        self._errors = docker_module().errors
        _reap_once(self.client)
        self._oom_seen = 0
        self.container = self._create(name_prefix)
        _cleanup.track(self)

    # -- life cycle --------------------------------------------------------------------------
    def _run_kwargs(self, name_prefix: str) -> dict[str, Any]:
        cfg, lim = self.config, self.limits
        docker = docker_module()
        kw: dict[str, Any] = {
            "image": cfg.image,
            "command": [
                "/bin/sh",
                "-c",
                _KEEPER,
                "keeper",
                _KEEPER_BASH.replace("{ttl}", str(int(lim.ttl_s))),
                _KEEPER_SH.replace("{ttl}", str(int(lim.ttl_s))),
            ],
            "entrypoint": [],
            "detach": True,
            "name": f"{name_prefix}-{os.getpid()}-{os.urandom(4).hex()}",
            "hostname": "sandbox",
            "labels": {**cfg.labels, **owner_labels(lim.ttl_s), "skyrl.profile": cfg.profile.value},
            "mem_limit": lim.memory_bytes,
            "memswap_limit": lim.memory_bytes,
            "pids_limit": lim.pids,
            "nano_cpus": int(lim.cpus * 1e9),
            "security_opt": ["no-new-privileges"],
            "ulimits": [
                docker.types.Ulimit(name="fsize", soft=lim.file_size_bytes, hard=lim.file_size_bytes),
                docker.types.Ulimit(name="core", soft=0, hard=0),
            ],
            "working_dir": cfg.workdir,
            "environment": {"HOME": cfg.workdir, "TMPDIR": "/tmp", "LANG": "C.UTF-8", **cfg.env},
            "network_mode": "bridge" if cfg.network else "none",
        }
        if cfg.profile is DockerProfile.STRICT:
            user = cfg.user or STRICT_USER
            uid, _, gid = user.partition(":")
            kw.update(
                user=user,
                read_only=True,
                cap_drop=["ALL"],
                tmpfs={
                    "/tmp": f"size={lim.tmp_bytes},mode=1777,nosuid,nodev",
                    cfg.workdir: f"size={lim.workspace_bytes},uid={uid},gid={gid or uid},mode=0755,nosuid,nodev",
                },
            )
        elif cfg.profile is DockerProfile.TASK:
            kw.update(user=cfg.user or "0:0")
            if cfg.network_name:
                endpoint = docker.types.EndpointConfig(
                    self.client.api._version, aliases=list(cfg.network_aliases)
                )
                del kw["network_mode"]
                kw.update(network=cfg.network_name, networking_config={cfg.network_name: endpoint})
        else:  # pragma: no cover - DockerProfile is closed
            raise ValueError(f"unknown profile {cfg.profile!r}")
        return kw

    def _create(self, name_prefix: str) -> Any:
        kw = self._run_kwargs(name_prefix)
        kw.pop("detach")
        try:
            try:
                container = self.client.containers.create(**kw)
            except self._errors.ImageNotFound:
                if not self.config.pull:
                    raise
                self.client.images.pull(self.config.image)
                container = self.client.containers.create(**kw)
        except self._errors.ImageNotFound as exc:
            raise SandboxError(
                f"image {self.config.image!r} not found: build the base images with `skyrl sandbox "
                "build-images`, `docker build` it, or set pull=True where a registry is reachable"
            ) from exc
        except self._errors.APIError as exc:
            raise SandboxError(
                f"could not create a sandbox container from {self.config.image!r}: {exc}"
            ) from exc
        try:
            container.start()
        except self._errors.APIError as exc:
            with contextlib.suppress(Exception):  # a half-made container must not linger
                container.remove(force=True)
            raise SandboxError(
                f"could not start a sandbox container from {self.config.image!r}: {exc}"
            ) from exc
        return container

    @property
    def name(self) -> str:
        """The container's name."""
        return self.container.name

    def __repr__(self) -> str:
        return f"DockerSandbox({self.name}, {self.config.image}, {self.config.profile.value})"

    def alive(self) -> bool:
        """True while the container runs."""
        try:
            self.container.reload()
        except self._errors.NotFound:
            return False
        return self.container.status == "running"

    def _close(self) -> None:
        _cleanup.untrack(self)
        try:
            self.container.remove(force=True, v=True)
        except self._errors.NotFound:
            pass
        except self._errors.APIError as exc:
            if "already in progress" not in str(exc):
                log.warning("could not remove %s: %s (the reaper will)", self.container.name, exc)

    def reset(self) -> bool:
        """Make the sandbox like new for the next episode: kill every process, empty the
        workspace and ``/tmp``. Returns False when that is not possible (the task profile,
        whose filesystem the task changed; a dead container), so the caller replaces it."""
        if self._closed or self.config.profile is not DockerProfile.STRICT:
            return False
        try:
            rc, _, _, _ = self._exec_raw(
                ["/bin/sh", "-c", _RESET, "reset", self.workdir, "/tmp", "/dev/shm"],
                stdin=None,
                timeout=30,
                env=None,
                workdir="/",
                out=Sink(4096),
                err=Sink(4096),
            )
        except SandboxError:
            return False
        return rc == 0 and self.alive()

    # -- exec --------------------------------------------------------------------------------
    def _exec_raw(
        self,
        argv: list[str],
        *,
        stdin: bytes | None,
        timeout: float,
        env: Mapping[str, str] | None,
        workdir: str | None,
        out: Any,
        err: Any,
        user: str = "",
    ) -> tuple[int | None, bool, float, str]:
        """Run ``argv`` as is; stream stdout/stderr into ``out``/``err``. Returns the exit code
        (None if it could not be learnt), whether the client deadline ran out, the seconds it
        took, and the exec id."""
        api = self.client.api
        start = time.monotonic()
        try:
            eid = api.exec_create(
                self.container.id,
                argv,
                stdout=True,
                stderr=True,
                stdin=stdin is not None,
                environment=dict(env) if env else None,
                workdir=workdir,
                user=user,
            )["Id"]
            sock = api.exec_start(eid, socket=True)
        except self._errors.NotFound as exc:
            raise SandboxError(f"sandbox container {self.name} is gone (killed or reaped)") from exc
        except self._errors.APIError as exc:
            raise SandboxError(f"exec in {self.name} failed: {exc}") from exc
        raw: socket.socket = sock._sock
        writer = None
        if stdin is not None:
            writer = threading.Thread(target=_send_all, args=(raw, stdin), daemon=True)
            writer.start()
        deadline = start + timeout
        hit = False
        buf = bytearray()
        sinks = {1: out, 2: err}
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    hit = True
                    break
                raw.settimeout(remaining)
                try:
                    chunk = raw.recv(1 << 20)
                except TimeoutError:
                    hit = True
                    break
                except OSError:
                    break
                if not chunk:
                    break
                buf += chunk
                pos = 0
                n = len(buf)
                while n - pos >= 8:
                    size = int.from_bytes(buf[pos + 4 : pos + 8], "big")
                    if n - pos - 8 < size:
                        break
                    sink = sinks.get(buf[pos])
                    if sink is not None:
                        sink.feed(bytes(buf[pos + 8 : pos + 8 + size]))
                    pos += 8 + size
                del buf[:pos]
        finally:
            with contextlib.suppress(OSError):
                raw.close()
            with contextlib.suppress(OSError):
                sock.close()
        if writer is not None:
            writer.join(timeout=1)
        rc: int | None = None
        try:
            info = api.exec_inspect(eid)
            if not info.get("Running"):
                rc = info.get("ExitCode")
        except self._errors.APIError:
            pass
        return rc, hit, time.monotonic() - start, eid

    def _kill_all(self) -> None:
        """Kill every process in the container but PID 1 (the backstop after a lost exec, and
        the way out of a full pids limit). With a daemon on this host the signals come from the
        host (:meth:`_sweep_from_host`); otherwise (a remote daemon, no permission) ``kill -KILL
        -1`` runs inside the container, which a fork bomb that fills the pids limit can block."""
        if self._sweep_from_host():
            return
        with contextlib.suppress(Exception):
            self._exec_raw(
                ["/bin/sh", "-c", "kill -KILL -1"],
                stdin=None,
                timeout=10,
                env=None,
                workdir="/",
                out=Sink(0),
                err=Sink(0),
            )

    def _sweep_from_host(self) -> bool:
        """Stop, then kill, every process in the container but PID 1, with signals sent from
        this host (a full pids limit cannot stop a ``kill`` that needs no fork in the container).
        Stopped processes cannot fork, so rounds of SIGSTOP catch up with a fork bomb; then one
        SIGKILL each; the keeper reaps them, which frees their pids. Returns False, changing nothing, when the daemon's processes are not this host's (a
        remote daemon) or we may not signal them."""
        try:
            self.container.reload()
            init = int(self.container.attrs["State"]["Pid"])
            with open(f"/proc/{init}/cgroup", encoding="utf-8") as f:
                if init <= 0 or self.container.id not in f.read():
                    return False
        except (OSError, KeyError, ValueError, self._errors.APIError):
            return False

        def others() -> set[int]:
            rows = self.client.api.top(cid, ps_args="-eo pid").get("Processes") or []
            return {int(row[0]) for row in rows} - {init}

        cid = self.container.id

        def signal_all(pids: set[int], sig: int) -> None:
            # through a pidfd, checked to be in this container after it was opened, so a pid
            # that a host process took over meanwhile is never signalled
            for pid in pids:
                try:
                    fd = os.pidfd_open(pid)
                except ProcessLookupError:
                    continue
                try:
                    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
                        ours = cid in f.read()
                    if ours:
                        signal.pidfd_send_signal(fd, sig)
                except (ProcessLookupError, FileNotFoundError):
                    pass
                finally:
                    os.close(fd)

        try:
            stopped: set[int] = set()
            for _ in range(50):
                fresh = others() - stopped
                if not fresh:
                    break
                signal_all(fresh, signal.SIGSTOP)
                stopped |= fresh
            signal_all(stopped | others(), signal.SIGKILL)
        except PermissionError:
            return False
        except (self._errors.APIError, ValueError, IndexError) as exc:
            log.warning("%s: host-side sweep failed: %s", self.name, exc)
            return False
        return True

    def _oom_killed(self) -> bool:
        sink = Sink(256)
        with contextlib.suppress(SandboxError):
            self._exec_raw(
                ["/bin/sh", "-c", _OOM_COUNT],
                stdin=None,
                timeout=10,
                env=None,
                workdir="/",
                out=sink,
                err=Sink(0),
            )
        try:
            count = int(sink.buf.getvalue().split()[0])
        except (ValueError, IndexError):
            return False
        seen, self._oom_seen = self._oom_seen, count
        return count > seen

    def exec(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a shell string or an argv list) in the container."""
        self._check_open()
        timeout = self.limits.timeout_s if timeout is None else float(timeout)
        if timeout <= 0:
            raise ConfigError(f"timeout must be > 0, got {timeout}")
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
        if not argv:
            raise ConfigError("empty command")
        data = stdin.encode() if isinstance(stdin, str) else stdin
        grace = self.limits.grace_s
        wrapped = ["/bin/sh", "-c", _WRAP_STDIN if data is not None else _WRAP, "skyrl-exec"]
        wrapped += [f"{grace:g}", f"{timeout:g}", *argv]
        out, err = HeadTail(self.limits.output_bytes), HeadTail(self.limits.output_bytes)
        rc, hit, took, _ = self._exec_raw(
            wrapped,
            stdin=data,
            timeout=timeout + grace + BACKSTOP_S,
            env=env,
            workdir=self._abs(workdir),
            out=out,
            err=err,
        )
        if hit or rc is None:
            log.warning("%s: exec outlived its deadline and backstop; killing every process", self.name)
            self._kill_all()
            rc = 137
        if rc == 126 and b"chdir to cwd" in out.getvalue():
            raise SandboxFileNotFoundError(f"workdir {self._abs(workdir)!r} does not exist in {self.name}")
        if rc == 127 and b"timeout: not found" in err.getvalue():
            raise SandboxError(f"image {self.config.image!r} has no `timeout` (coreutils or busybox)")
        if _saturated(rc, out, err):
            # the pids limit is full (a fork bomb that left its process group): nothing can
            # start, so kill every process (``kill`` is a shell builtin and needs no fork)
            for _ in range(3):
                self._kill_all()
                if (
                    self._exec_raw(
                        ["true"], stdin=None, timeout=10, env=None, workdir="/", out=Sink(0), err=Sink(0)
                    )[0]
                    == 0
                ):
                    break
            err.feed(b"\n[sandbox: the process limit was reached; every process in the sandbox was killed]\n")
        timed_out = hit or (rc in (124, 137) and took >= timeout)
        sig = rc - 128 if 128 < rc < 160 else None
        if timed_out and rc == 124:
            sig = 15
        oom = rc == 137 and not timed_out and self._oom_killed()
        return ExecResult(
            stdout=out.text(),
            stderr=err.text(),
            exit_code=rc,
            timed_out=timed_out,
            oom_killed=oom,
            output_truncated=out.truncated or err.truncated,
            signal=sig,
            duration_s=took,
            stdout_bytes=out.total,
            stderr_bytes=err.total,
        )

    # -- files ----------------------------------------------------------------------------
    def _transfer(
        self, script: str, args: list[str], *, stdin: bytes | None, out: Any
    ) -> tuple[int | None, str]:
        self._check_open()
        err = Sink(64 * 1024)
        rc, hit, _, _ = self._exec_raw(
            ["/bin/sh", "-c", script, "skyrl-file", *args],
            stdin=stdin,
            timeout=TRANSFER_TIMEOUT_S,
            env=None,
            workdir="/",
            out=out,
            err=err,
        )
        if hit:
            self._kill_all()
            raise SandboxError(f"file transfer in {self.name} took longer than {TRANSFER_TIMEOUT_S} s")
        return rc, err.buf.getvalue().decode("utf-8", "replace").strip()


def _saturated(rc: int, out: HeadTail, err: HeadTail) -> bool:
    """True when a command could not even start because the container's pids limit is full."""
    if rc not in (2, 125, 126, 127):
        return False
    text = (out.head[:4096] + err.head[:4096]).lower()
    return any(
        m in text
        for m in (
            b"cannot fork",
            b"fork system call failed",
            b"resource temporarily unavailable",
            b"oci runtime exec failed",
        )
    )


def _send_all(sock: socket.socket, data: bytes) -> None:
    """Write stdin to an exec's socket and half-close it so the command sees end of file."""
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the command ended without reading it all
