"""A Harbor environment that runs a task's container with the plain ``docker`` CLI.

Harbor's own ``docker`` environment drives Docker Compose v2 (``docker compose up --wait``,
``compose cp``) and, for ``no-network`` tasks, an egress-control sidecar image it pulls; neither
exists on a machine whose only sources are the Debian 12 mirror and images built locally. This
class is Harbor's ``BaseEnvironment`` over ``docker run`` / ``exec`` / ``cp`` / ``rm`` instead,
for single-container tasks:

    harbor run -p TASK -a oracle --env skyrl_docker_env:SkyRLDockerEnvironment \\
        --ek image=skyrl-harbor/hello-file:<hash>           # PYTHONPATH=<this folder>

It is loaded by Harbor's Python (3.12), so it imports Harbor and the standard library only,
never this project's packages. :mod:`harbor_adapter.harness` runs ``harbor run`` with it.

* Image: the ``image`` keyword (the driver builds it offline with our builder), else the task's
  ``docker_image``, else ``docker build --network none`` of ``environment/`` (the ``FROM`` image
  must be local: nothing is pulled).
* Network: ``no-network`` is ``--network none``; ``public`` is Docker's default bridge;
  ``allowlist`` is refused (this class runs no services).
* Limits: the task's (or Harbor's override) CPUs and memory become ``--cpus`` / ``--memory``.
* Clean-up: the container carries the ``labels`` keyword (the driver passes its own
  ``skyrl.owner.*`` labels and a time-to-live), else labels naming Harbor's process, so
  ``skyrl sandbox reap`` removes it after ``kill -9`` of either; ``stop`` removes it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import socket
import time
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.models.task.config import NetworkMode

__all__ = ["SkyRLDockerEnvironment"]

_LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
_DEFAULT_TTL_S = 6 * 3600


def _process_start(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return ""
    return stat[stat.rindex(b")") + 2 :].split()[19].decode()


def _own_labels(ttl_s: float) -> dict[str, str]:
    """The ``skyrl.*`` labels the reaper reads, naming this (Harbor's) process as the owner."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "unknown"
    pid = os.getpid()
    return {
        "skyrl.sandbox": "1",
        "skyrl.owner.pid": str(pid),
        "skyrl.owner.start": _process_start(pid),
        "skyrl.owner.boot_id": boot,
        "skyrl.owner.host": socket.gethostname(),
        "skyrl.created": f"{time.time():.3f}",
        "skyrl.ttl_s": f"{ttl_s:.0f}",
    }


async def _docker(*args: str, timeout_sec: float | None = None, stdin: bytes | None = None) -> ExecResult:
    """Run ``docker ARGS``; on timeout kill the client and raise ``RuntimeError`` (as Harbor's
    docker environment does)."""
    proc = await asyncio.create_subprocess_exec(
        "docker",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=timeout_sec)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"docker {args[0]} timed out after {timeout_sec} seconds") from None
    return ExecResult(
        stdout=out.decode(errors="replace") if out else None,
        stderr=err.decode(errors="replace") if err else None,
        return_code=proc.returncode or 0,
    )


def _context_tag(name: str, context: Path) -> str:
    h = hashlib.sha256(b"skyrl-harbor-plugin-v1\0")
    for p in sorted(context.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(context).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "-" for c in name.lower())
    return f"skyrl-harbor/{safe.strip('-._') or 'task'}:plugin-{h.hexdigest()[:16]}"


class SkyRLDockerEnvironment(BaseEnvironment):
    """One container per trial through the ``docker`` CLI (see the module docstring)."""

    def __init__(
        self,
        environment_dir: Path,
        environment_name: str,
        session_id: str,
        trial_paths: Any,
        task_env_config: Any,
        *args: Any,
        image: str | None = None,
        labels: dict[str, str] | str | None = None,
        ttl_s: float = _DEFAULT_TTL_S,
        docker_timeout_sec: float = 120.0,
        **kwargs: Any,
    ) -> None:
        self._image = image or None
        if isinstance(labels, str):  # from ``--ek labels='{...}'``
            labels = json.loads(labels)
        self._labels = dict(labels) if labels else _own_labels(float(ttl_s))
        self._docker_timeout = float(docker_timeout_sec)
        safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "-" for c in session_id)
        self._container = f"skyrl-harbor-{safe.strip('-._')[:80]}"
        self._started = False
        super().__init__(
            environment_dir, environment_name, session_id, trial_paths, task_env_config, *args, **kwargs
        )

    @staticmethod
    def type() -> str:
        return "skyrl-docker"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True)

    @classmethod
    def preflight(cls) -> None:
        import shutil
        import subprocess

        if shutil.which("docker") is None:
            raise SystemExit("skyrl-docker needs the docker CLI on PATH (apt-get install docker.io)")
        if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
            raise SystemExit("skyrl-docker: the Docker daemon does not answer (bash scripts/start-docker.sh)")

    def _validate_definition(self) -> None:
        if self._image or self.task_env_config.docker_image:
            return
        if not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(
                f"{self.environment_dir}: no Dockerfile, and neither the task's docker_image nor the "
                "environment's `image` keyword names an image"
            )
        if (self.environment_dir / "docker-compose.yaml").is_file():
            raise ValueError("skyrl-docker runs single-container tasks; this task has a docker-compose.yaml")

    async def _ensure_image(self, force_build: bool) -> str:
        if self._image:
            return self._image
        if self.task_env_config.docker_image:
            return self.task_env_config.docker_image
        tag = _context_tag(self.environment_name, self.environment_dir)
        if (
            not force_build
            and (await _docker("image", "inspect", tag, timeout_sec=self._docker_timeout)).return_code == 0
        ):
            return tag
        built = await _docker(
            "build", "--network", "none", "-t", tag, str(self.environment_dir),
            timeout_sec=float(self.task_env_config.build_timeout_sec),
        )  # fmt: skip
        if built.return_code != 0:
            raise RuntimeError(
                f"docker build of {self.environment_dir} failed:\n{(built.stderr or '')[-2000:]}"
            )
        return tag

    async def start(self, force_build: bool) -> None:
        if self._network_is_allowlist:
            raise ValueError("skyrl-docker cannot enforce network_mode='allowlist' (it runs no services)")
        image = await self._ensure_image(force_build)
        args = ["run", "-d", "--name", self._container, "--entrypoint", "", "--init"]
        for k, v in self._labels.items():
            args += ["--label", f"{k}={v}"]
        args += ["--label", f"skyrl.harbor.session={self.session_id}"]
        args += [
            "--network",
            "none" if self._network_policy.network_mode == NetworkMode.NO_NETWORK else "bridge",
        ]
        if self._effective_cpus:
            args += ["--cpus", str(self._effective_cpus)]
        if self._effective_memory_mb:
            args += ["--memory", f"{int(self._effective_memory_mb)}m"]
        for k, v in self._startup_env().items():
            args += ["-e", f"{k}={v}"]
        args += [image, "sh", "-c", "sleep infinity"]
        run = await _docker(*args, timeout_sec=self._docker_timeout)
        if run.return_code != 0:
            raise RuntimeError(f"docker run {image} failed: {(run.stderr or '').strip()[-2000:]}")
        self._started = True
        dirs = " ".join(_LOG_DIRS)
        made = await self.exec(f"mkdir -p {dirs} && chmod 777 {dirs}", user="root", timeout_sec=60)
        if made.return_code != 0:
            raise RuntimeError(f"could not make Harbor's log folders: {made.stdout or ''}{made.stderr or ''}")

    async def stop(self, delete: bool) -> None:
        # Always removed: a stopped container of a finished trial is nothing anyone resumes.
        await _docker("rm", "-f", "-v", self._container, timeout_sec=self._docker_timeout)
        self._started = False

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        args = ["exec"]
        if cwd:
            args += ["-w", cwd]
        for k, v in (self._merge_env(env) or {}).items():
            args += ["-e", f"{k}={v}"]
        user = self._resolve_user(user)
        if user is not None:
            args += ["-u", str(user)]
        args += [self._container, "bash", "-c", command]
        return await _docker(*args, timeout_sec=timeout_sec)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        parent = str(Path(target_path).parent)
        await self.exec(f"mkdir -p {shlex.quote(parent)}", user="root", timeout_sec=60)
        done = await _docker(
            "cp", str(source_path), f"{self._container}:{target_path}", timeout_sec=self._docker_timeout
        )
        if done.return_code != 0:
            raise RuntimeError(f"upload of {source_path} failed: {done.stderr}")

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await self.exec(f"mkdir -p {shlex.quote(target_dir)}", user="root", timeout_sec=60)
        done = await _docker(
            "cp", f"{source_dir}/.", f"{self._container}:{target_dir}", timeout_sec=self._docker_timeout
        )
        if done.return_code != 0:
            raise RuntimeError(f"upload of {source_dir} failed: {done.stderr}")

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        done = await _docker(
            "cp", f"{self._container}:{source_path}", str(target_path), timeout_sec=self._docker_timeout
        )
        if done.return_code != 0:
            raise RuntimeError(f"download of {source_path} failed: {done.stderr}")

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        Path(target_dir).mkdir(parents=True, exist_ok=True)
        done = await _docker(
            "cp",
            f"{self._container}:{source_dir.rstrip('/')}/.",
            str(target_dir),
            timeout_sec=self._docker_timeout,
        )
        if done.return_code != 0:
            raise RuntimeError(f"download of {source_dir} failed: {done.stderr}")
