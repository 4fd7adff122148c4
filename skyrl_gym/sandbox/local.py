"""The local-process backend: own working directory, rlimits, whole-tree kill, bubblewrap.

Each ``exec`` starts a fresh process tree in its own session, under ``prlimit`` (CPU time,
address space, processes, file size, no core dumps) and, where bubblewrap works, inside new
namespaces with all capabilities dropped. When the command ends, everything it started ends
too: under bubblewrap the pid namespace dies with it; otherwise the sandbox kills every process
of its own uid (as root) or of its session. On timeout: SIGTERM, ``grace_s``, SIGKILL.

``spawn`` starts one long-lived process instead (a worker that serves many requests over its
pipes, such as the persistent REPL of the ``rlm`` envs), under the same isolation and limits;
``kill`` or ``close`` end it with everything it started.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import random
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_gym.errors import ConfigError, SandboxError
from skyrl_gym.sandbox import _cleanup
from skyrl_gym.sandbox._base import TRANSFER_TIMEOUT_S, BaseSandbox, Sink
from skyrl_gym.sandbox._output import HeadTail
from skyrl_gym.sandbox.types import (
    Command,
    ExecResult,
    LocalIsolation,
    LocalSandboxConfig,
    SandboxFileNotFoundError,
    SandboxLimits,
)

__all__ = ["LocalSandbox", "bwrap_usable"]

log = logging.getLogger(__name__)

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_UID_RANGE = (2_000_000, 3_000_000)
_DRAIN_S = 2.0  # how long to wait for pipes to close after the main process ended


@functools.cache
def bwrap_usable() -> bool:
    """True when bubblewrap is installed and can create namespaces on this machine."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    args = [exe, "--unshare-all", "--die-with-parent", "--cap-drop", "ALL"]
    args += _system_binds() + ["--proc", "/proc", "--dev", "/dev", "--", "/bin/true"]
    kwargs = {}
    if os.geteuid() == 0:  # run unprivileged, as the sandboxes will
        kwargs = {"user": _UID_RANGE[0] - 1, "group": _UID_RANGE[0] - 1, "extra_groups": []}
    try:
        return subprocess.run(args, capture_output=True, timeout=10, **kwargs).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _system_binds() -> list[str]:
    args: list[str] = []
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    return args


def _proc_ids(pid: int) -> tuple[int, int] | None:
    """(real uid, session id) of a live process, or None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            return None
        sid = int(fields[3])
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1]), sid
    except (OSError, ValueError, IndexError):
        return None
    return None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def _pids_where(uid: int | None = None, sid: int | None = None) -> list[int]:
    """Live processes with real uid ``uid`` or in session ``sid``."""
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        if sid is None and uid is not None:
            try:  # the owner of /proc/PID is the process's effective uid: a cheap first filter
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
            except OSError:
                continue
        ids = _proc_ids(int(name))
        if ids is None:
            continue
        if (uid is not None and ids[0] == uid) or (sid is not None and ids[1] == sid):
            found.append(int(name))
    return found


class LocalSandbox(BaseSandbox):
    """A sandbox of local processes in a working directory of its own.

    >>> with LocalSandbox() as sb:
    ...     sb.exec("echo hi").stdout
    'hi\\n'
    """

    def __init__(
        self, config: LocalSandboxConfig | None = None, *, limits: SandboxLimits | None = None
    ) -> None:
        config = config or LocalSandboxConfig()
        if limits is not None:
            config = LocalSandboxConfig(**{**config.__dict__, "limits": limits})
        self.config = config
        self.limits = config.limits
        if config.isolation is LocalIsolation.BWRAP and not bwrap_usable():
            raise SandboxError(
                "isolation='bwrap' but bubblewrap is missing or cannot create namespaces here: "
                "apt-get install bubblewrap (and allow unprivileged user namespaces), or use isolation='auto'"
            )
        self.use_bwrap = config.isolation is LocalIsolation.BWRAP or (
            config.isolation is LocalIsolation.AUTO and bwrap_usable()
        )
        self.uid: int | None = None
        if config.own_uid and os.geteuid() == 0:
            self.uid = self._free_uid()
        # One command at a time: cleanup after a command kills every process of the sandbox.
        self._lock = threading.RLock()  # re-entrant: close() may run from a signal handler mid-command
        self._spawned: subprocess.Popen[bytes] | None = None  # the process spawn() started
        self._prlimit = shutil.which("prlimit")
        self._bwrap = shutil.which("bwrap")
        base = config.base_dir or tempfile.gettempdir()
        self.workdir = tempfile.mkdtemp(prefix="skyrl-sbx-", dir=base)
        os.chmod(self.workdir, 0o700)
        if self.uid is not None:
            os.chown(self.workdir, self.uid, self.uid)
        _cleanup.track(self)  # killed and removed at exit and on SIGTERM

    @staticmethod
    def _free_uid() -> int:
        used = set()
        for name in os.listdir("/proc"):
            if name.isdigit() and (ids := _proc_ids(int(name))):
                used.add(ids[0])
        while True:
            uid = random.randrange(*_UID_RANGE)
            if uid not in used:
                return uid

    def __repr__(self) -> str:
        mode = "bwrap" if self.use_bwrap else "process"
        return f"LocalSandbox({self.workdir!r}, {mode}, uid={self.uid})"

    # -- exec --------------------------------------------------------------------------------
    def _argv(self, argv: list[str], cwd: str, timeout: float) -> list[str]:
        lim = self.limits
        cpu = math.ceil(timeout * lim.cpus + lim.grace_s) + 1
        rl = [
            f"--cpu={cpu}",
            f"--as={lim.memory_bytes}",
            f"--fsize={lim.file_size_bytes}",
            "--core=0",
        ]
        if self.uid is not None or os.geteuid() != 0:
            rl.append(f"--nproc={lim.pids}")
        prefix = [self._prlimit, *rl, "--"] if self._prlimit else []
        if not self.use_bwrap:
            return prefix + argv
        bw = [self._bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if self.config.network:
            bw.append("--share-net")
        bw += _system_binds()
        for p in self.config.ro_paths:
            bw += ["--ro-bind", p, p]
        bw += ["--proc", "/proc", "--dev", "/dev", "--size", str(lim.tmp_bytes), "--tmpfs", "/tmp"]
        bw += ["--bind", self.workdir, self.workdir, "--chdir", cwd, "--"]
        return prefix + bw + argv

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": self.workdir,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.update(self.config.env)
        env.update(extra or {})
        return env

    def _signal_all(self, proc: subprocess.Popen[bytes], sig: int) -> None:
        """Send ``sig`` to every process this sandbox's command started."""
        if self.uid is not None:
            spare = set()
            if sig != signal.SIGKILL and self.use_bwrap:
                # bubblewrap itself and its pid-1 reaper die on SIGTERM and take the command with
                # them; spare them so the command gets its grace period
                spare = {proc.pid, *_children(proc.pid)}
            for _ in range(50):  # a fork bomb refills; repeat until none is left
                pids = [p for p in _pids_where(uid=self.uid) if p not in spare]
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)
                if sig != signal.SIGKILL:
                    break
                time.sleep(0.01)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            if sig == signal.SIGKILL and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()  # under bubblewrap this tears the pid namespace down
            if sig == signal.SIGKILL:
                for pid in _pids_where(sid=proc.pid):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)

    def exec(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a shell string or an argv list) and return what happened.

        Commands of one sandbox run one at a time (concurrent calls wait for each other)."""
        with self._lock:
            return self._exec(cmd, timeout=timeout, env=env, workdir=workdir, stdin=stdin)

    def _exec(
        self,
        cmd: Command,
        *,
        timeout: float | None,
        env: Mapping[str, str] | None,
        workdir: str | None,
        stdin: bytes | str | None,
    ) -> ExecResult:
        self._check_open()
        self._check_not_spawned()
        timeout = self.limits.timeout_s if timeout is None else float(timeout)
        if timeout <= 0:
            raise ConfigError(f"timeout must be > 0, got {timeout}")
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
        if not argv:
            raise ConfigError("empty command")
        cwd = self._abs(workdir)
        if not os.path.isdir(cwd):
            raise SandboxFileNotFoundError(f"workdir {cwd!r} does not exist in the sandbox")
        data = stdin.encode() if isinstance(stdin, str) else stdin
        start = time.monotonic()
        proc = self._spawn(argv, cwd, timeout, env, data)
        out, err = HeadTail(self.limits.output_bytes), HeadTail(self.limits.output_bytes)
        try:
            timed_out, needed_kill = self._pump(proc, data, start + timeout, out, err)
        finally:
            self._reap(proc)
        rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        sig = -rc if rc < 0 else (rc - 128 if self.use_bwrap and 128 < rc < 160 else None)
        code = 128 + sig if rc < 0 and sig else rc
        if timed_out:
            code = 137 if needed_kill else 124
        return ExecResult(
            stdout=out.text(),
            stderr=err.text(),
            exit_code=code,
            timed_out=timed_out,
            output_truncated=out.truncated or err.truncated,
            signal=sig,
            duration_s=time.monotonic() - start,
            stdout_bytes=out.total,
            stderr_bytes=err.total,
        )

    # -- long-lived processes -------------------------------------------------------------------
    def spawn(
        self,
        argv: Sequence[str],
        *,
        cpu_budget_s: float,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a long-lived process in the sandbox and return it, with pipes on its stdin,
        stdout and stderr for the caller to talk to it (a worker serving many requests).

        It runs with the sandbox's isolation, uid and limits; its CPU-time limit is worked out
        as for an ``exec`` whose deadline is ``cpu_budget_s``. There is no wall-clock deadline:
        the caller keeps its own and ends the process with :meth:`kill`; ``close()`` ends it
        too. Under bubblewrap it also dies with this process (``--die-with-parent``; the kernel
        ties that to the thread that called ``spawn``). One at a time: while it runs, ``exec``
        and the file methods raise ``SandboxError``, because their cleanup would end it."""
        if not cpu_budget_s > 0:
            raise ConfigError(f"cpu_budget_s must be > 0, got {cpu_budget_s!r}")
        args = [str(a) for a in argv]
        if not args:
            raise ConfigError("empty command")
        with self._lock:
            self._check_open()
            self._check_not_spawned()
            cwd = self._abs(workdir)
            if not os.path.isdir(cwd):
                raise SandboxFileNotFoundError(f"workdir {cwd!r} does not exist in the sandbox")
            self._spawned = self._spawn(args, cwd, cpu_budget_s, env, None, pipe_stdin=True)
            return self._spawned

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """End ``proc`` (started by :meth:`spawn`) and everything else the sandbox runs, wait
        for it and close its pipes. Idempotent."""
        with self._lock:
            self._reap(proc)
            if proc is self._spawned:
                self._spawned = None

    def _check_not_spawned(self) -> None:
        proc = self._spawned
        if proc is not None and proc.poll() is None:
            raise SandboxError(
                f"{self!r} runs a process started with spawn() (pid {proc.pid}); a command or file "
                "transfer would end it: kill() it first, or use another sandbox"
            )

    def _spawn(
        self,
        argv: list[str],
        cwd: str,
        timeout: float,
        env: Mapping[str, str] | None,
        data: bytes | None,
        *,
        pipe_stdin: bool = False,
    ) -> subprocess.Popen[bytes]:
        user = {"user": self.uid, "group": self.uid, "extra_groups": []} if self.uid is not None else {}
        return subprocess.Popen(
            self._argv(argv, cwd, timeout),
            stdin=subprocess.PIPE if data or pipe_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/" if self.use_bwrap else cwd,  # bubblewrap changes directory inside
            env=self._env(env),
            start_new_session=True,
            close_fds=True,
            **user,
        )

    def _reap(self, proc: subprocess.Popen[bytes]) -> None:
        """Kill what is left of a command and collect its exit status. (Under bubblewrap the
        pid namespace dies with the command, but its members may still be exiting: the sweep
        waits until they are gone, so nothing of a command outlives ``exec``.)"""
        self._signal_all(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()

    def _pump(
        self, proc: subprocess.Popen[bytes], data: bytes | None, deadline: float, out: Any, err: Any
    ) -> tuple[bool, bool]:
        """Feed stdin, stream output into ``out``/``err``, enforce the deadline. Returns whether
        the command timed out and whether it needed SIGKILL."""
        assert proc.stdout is not None and proc.stderr is not None
        bufs = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        sel = selectors.DefaultSelector()
        for fd in bufs:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        pending = memoryview(data) if data else None
        if pending is not None and proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
        timed_out = needed_kill = False
        stop_at: float | None = None  # set once the main process ended or was killed
        kill_at: float | None = None
        try:
            while any(k.fd in bufs for k in sel.get_map().values()):
                now = time.monotonic()
                if stop_at is None and proc.poll() is not None:
                    stop_at = now + _DRAIN_S
                    if not self.use_bwrap:  # under bubblewrap they died with the pid namespace
                        self._signal_all(proc, signal.SIGKILL)  # background children end with it
                elif stop_at is None and kill_at is None and now >= deadline:
                    timed_out = True
                    self._signal_all(proc, signal.SIGTERM)
                    kill_at = now + self.limits.grace_s
                if kill_at is not None and stop_at is None and now >= kill_at:
                    needed_kill = True
                    self._signal_all(proc, signal.SIGKILL)
                    stop_at = now + _DRAIN_S
                if stop_at is not None and now >= stop_at:
                    break
                nxt = min(t for t in (deadline, kill_at, stop_at, now + 0.05) if t is not None)
                for key, _ in sel.select(timeout=max(0.0, nxt - now)):
                    fd = key.fd
                    if fd in bufs:
                        try:
                            chunk = os.read(fd, 1 << 20)
                        except BlockingIOError:
                            continue
                        if chunk:
                            bufs[fd].feed(chunk)
                        else:
                            sel.unregister(fd)
                    else:
                        assert pending is not None
                        try:
                            n = os.write(fd, pending[:65536])
                            pending = pending[n:]
                        except BlockingIOError:
                            continue
                        except (BrokenPipeError, OSError):
                            pending = pending[:0]
                        if not pending:
                            sel.unregister(fd)
                            assert proc.stdin is not None
                            proc.stdin.close()
        finally:
            sel.close()
        if proc.poll() is None and kill_at is not None and stop_at is None:
            needed_kill = True  # pipes closed but the process ignored SIGTERM so far
        return timed_out, needed_kill

    # -- files (read_file, write_file, upload, download: see BaseSandbox) ----------------------
    def _transfer(
        self, script: str, args: list[str], *, stdin: bytes | None, out: Any
    ) -> tuple[int | None, str]:
        # Runs as the sandbox's uid, in its namespaces: a symlink planted by a command cannot
        # make a (root) host process read or write outside the sandbox.
        err = Sink(64 * 1024)
        with self._lock:
            self._check_open()
            self._check_not_spawned()
            proc = self._spawn(
                ["/bin/sh", "-c", script, "skyrl-file", *args], self.workdir, TRANSFER_TIMEOUT_S, None, stdin
            )
            try:
                timed_out, _ = self._pump(proc, stdin, time.monotonic() + TRANSFER_TIMEOUT_S, out, err)
            finally:
                self._reap(proc)
        if timed_out:
            raise SandboxError(f"file transfer in {self!r} took longer than {TRANSFER_TIMEOUT_S} s")
        return proc.returncode, err.buf.getvalue().decode("utf-8", "replace").strip()

    def _close(self) -> None:
        _cleanup.untrack(self)
        with self._lock:
            if self._spawned is not None:
                self._reap(self._spawned)
                self._spawned = None
            self._kill_uid_and_remove()

    def _kill_uid_and_remove(self) -> None:
        if self.uid is not None:
            for _ in range(50):
                pids = _pids_where(uid=self.uid)
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)
        shutil.rmtree(self.workdir, ignore_errors=True)
