"""Multi-container Harbor tasks: the services of ``environment/docker-compose.yaml``.

As in Harbor, ``main`` is the agent's container (built from ``environment/Dockerfile``) and the
compose file adds services next to it (a database, a web server) and may give ``main`` more
environment variables. Here:

- :func:`parse_compose` reads and checks the file when the task loads. A service may have
  ``image`` or ``build`` (a folder inside ``environment/``), ``command``, ``entrypoint``,
  ``environment``, ``healthcheck``, ``depends_on``, ``working_dir``, ``user``, ``volumes`` (named
  volumes, or folders inside ``environment/``), ``tmpfs``, ``init``, ``labels`` and a few more;
  ``ports``, ``networks``, ``restart`` and ``container_name`` are ignored (nothing is published on
  the host, every service is on the task's network, names are made per trial); keys that would
  loosen the sandbox (``privileged``, ``network_mode``, ``cap_add``, ``devices``, host paths in
  ``volumes``, ...) are refused with the reason.
- :class:`TaskServices` runs them for one trial with Docker Compose (the ``docker compose``
  plugin, else Debian's ``docker-compose``): the service images are built first as the main image
  is (offline, content-hash tags, ``build_timeout_sec``; an ``image`` must already be on the
  machine), then compose starts the project on a task-private network made for the trial:
  *internal* (no route off the machine, so the only hosts anyone on it can reach are the task's
  own services) unless the task's ``network_mode`` is ``public``. The agent's container joins
  that network as ``main``. Every container, the network and the volumes carry the sandbox
  layer's owner labels, so the reaper removes them after ``kill -9`` of the owner, and
  :meth:`TaskServices.close` removes them at the end of the trial.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harbor_adapter.errors import (
    ImageBuildError,
    TaskConfigError,
    TrialError,
    TrialTimeoutError,
    UnsupportedTaskError,
)
from harbor_adapter.types import ComposeService, ComposeSpec, HarborTask

__all__ = ["parse_compose", "compose_command", "TaskServices", "MAIN", "PROJECT_LABEL"]

log = logging.getLogger(__name__)

#: The agent's service.
MAIN = "main"
#: The label compose puts on the containers of a project.
PROJECT_LABEL = "com.docker.compose.project"

_SERVICE_KEYS = {
    "image",
    "build",
    "command",
    "entrypoint",
    "environment",
    "healthcheck",
    "depends_on",
    "working_dir",
    "user",
    "expose",
    "labels",
    "init",
    "tmpfs",
    "volumes",
    "stop_signal",
    "stop_grace_period",
    "hostname",
    "shm_size",
}
_IGNORED_KEYS = {
    "ports",
    "networks",
    "restart",
    "container_name",
    "pull_policy",
    "platform",
    "logging",
    "deploy",
}
_REFUSED_WHY = {
    "privileged": "a privileged container can leave the sandbox",
    "network_mode": "every service is on the task's own network",
    "cap_add": "services keep Docker's default capabilities",
    "devices": "host devices are not passed into tasks",
    "pid": "services do not share the host's (or another container's) process namespace",
    "ipc": "services do not share IPC namespaces",
    "userns_mode": "user namespaces stay the daemon's",
    "cgroup_parent": "cgroups stay the daemon's",
    "security_opt": "the sandbox sets the security options (no-new-privileges)",
    "volumes_from": "use a named volume shared by both services",
    "env_file": "put the variables under environment",
    "extends": "write the service out in full",
}
_TOP_KEYS = {"services", "version", "volumes", "networks", "name"}
_BUILD_KEYS = {"context", "dockerfile"}


def _where(path: Path, service: str | None = None) -> str:
    return f"{path}" + (f": service {service!r}" if service else "")


def _environment(value: Any, where: str) -> dict[str, str]:
    """``environment`` as a mapping (a list of ``KEY=VALUE`` or a mapping); a key without a
    value gets the empty string (nothing comes from the host)."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    if isinstance(value, list):
        out = {}
        for item in value:
            key, sep, val = str(item).partition("=")
            out[key] = val if sep else ""
        return out
    raise TaskConfigError(f"{where}: environment must be a mapping or a list of KEY=VALUE")


def _inside(root: Path, rel: str, where: str, what: str) -> Path:
    path = (root / rel).resolve()
    if path != root and root not in path.parents:
        raise UnsupportedTaskError(f"{where}: {what} {rel!r} is outside environment/; keep it in the task")
    return path


def _volumes(value: Any, env_dir: Path, named: set[str], where: str) -> list[Any]:
    """Named volumes stay; a relative bind (``./data:/data``) inside ``environment/`` becomes
    absolute; a host path is refused."""
    if not isinstance(value, list):
        raise TaskConfigError(f"{where}: volumes must be a list")
    out: list[Any] = []
    for item in value:
        if isinstance(item, Mapping):
            kind, source = item.get("type", "volume"), str(item.get("source") or "")
            if kind == "bind":
                out.append({**item, "source": str(_inside(env_dir, source, where, "bind mount"))})
                continue
            if kind == "volume" and source and source not in named:
                raise TaskConfigError(f"{where}: volume {source!r} is not in the top-level volumes")
            if kind not in ("volume", "tmpfs"):
                raise UnsupportedTaskError(f"{where}: volume type {kind!r}; use volume, bind or tmpfs")
            out.append(dict(item))
            continue
        parts = str(item).split(":")
        source = parts[0] if len(parts) > 1 else ""
        if not source:  # an anonymous volume: "/data"
            out.append(str(item))
        elif source.startswith((".", "~")) or "/" in source:
            if source.startswith(("/", "~")):
                raise UnsupportedTaskError(
                    f"{where}: {item!r} mounts a host path; mount a folder inside environment/ "
                    "(./data:/data) or a named volume"
                )
            out.append(":".join([str(_inside(env_dir, source, where, "bind mount")), *parts[1:]]))
        elif source in named:
            out.append(str(item))
        else:
            raise TaskConfigError(f"{where}: volume {source!r} is not in the top-level volumes")
    return out


def _build(value: Any, env_dir: Path, where: str) -> tuple[Path, str]:
    if isinstance(value, str):
        value = {"context": value}
    if not isinstance(value, Mapping):
        raise TaskConfigError(f"{where}: build must be a folder or a mapping with context")
    extra = sorted(set(value) - _BUILD_KEYS)
    if extra:
        raise UnsupportedTaskError(
            f"{where}: build keys {extra} are not supported (only context and dockerfile)"
        )
    context = _inside(env_dir, str(value.get("context") or "."), where, "build context")
    dockerfile = str(value.get("dockerfile") or "Dockerfile")
    if not (context / dockerfile).is_file():
        raise TaskConfigError(f"{where}: no {dockerfile} in {context}")
    return context, dockerfile


def parse_compose(path: Path, env_dir: Path) -> ComposeSpec:
    """Read and check a task's compose file (see the module docstring); errors name the file,
    the service and the key."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise TaskConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping) or not isinstance(data.get("services") or {}, Mapping):
        raise TaskConfigError(f"{path}: a compose file is a mapping with a services mapping")
    data = {**data, "services": data.get("services") or {}}
    unknown = sorted(k for k in set(data) - _TOP_KEYS if not str(k).startswith("x-"))
    if unknown:
        raise UnsupportedTaskError(f"{path}: top-level keys {unknown} are not supported")
    ignored: list[str] = []
    if data.get("networks"):
        ignored.append("networks")
    named_spec = data.get("volumes") or {}
    if not isinstance(named_spec, Mapping):
        raise TaskConfigError(f"{path}: the top-level volumes must be a mapping of names")
    for name, spec in named_spec.items():
        if spec and (not isinstance(spec, Mapping) or set(spec) - {"labels"}):
            raise UnsupportedTaskError(f"{path}: volume {name!r}: only plain named volumes are supported")
    named = {str(n) for n in named_spec}
    names = {str(n) for n in data["services"]}
    services: list[ComposeService] = []
    main_env: dict[str, str] = {}
    for raw_name, raw in data["services"].items():
        name = str(raw_name)
        where = _where(path, name)
        if not isinstance(raw, Mapping):
            raise TaskConfigError(f"{where}: a service must be a mapping")
        if name == MAIN:
            main_env = _environment(raw.get("environment"), where)
            ignored += [f"services.main.{k}" for k in raw if k not in ("environment", "depends_on")]
            continue
        for key in raw:
            if key in _REFUSED_WHY:
                raise UnsupportedTaskError(f"{where}: {key} is refused ({_REFUSED_WHY[key]})")
            if key not in _SERVICE_KEYS and key not in _IGNORED_KEYS:
                raise UnsupportedTaskError(
                    f"{where}: key {key!r} is not supported; supported: {sorted(_SERVICE_KEYS)}"
                )
        ignored += [f"services.{name}.{k}" for k in raw if k in _IGNORED_KEYS]
        spec = {k: v for k, v in raw.items() if k in _SERVICE_KEYS}
        context = None
        dockerfile = "Dockerfile"
        if "build" in spec:
            context, dockerfile = _build(spec.pop("build"), env_dir, where)
        elif not isinstance(spec.get("image"), str) or not spec["image"]:
            raise TaskConfigError(f"{where}: a service needs an image or a build folder")
        if "environment" in spec:
            spec["environment"] = _environment(spec["environment"], where)
        if "volumes" in spec:
            spec["volumes"] = _volumes(spec["volumes"], env_dir, named, where)
        depends = spec.get("depends_on") or []
        for dep in depends if isinstance(depends, list) else list(depends):
            if str(dep) == MAIN:
                raise UnsupportedTaskError(
                    f"{where}: depends_on main; main (the agent's container) starts last"
                )
            if str(dep) not in names:
                raise TaskConfigError(f"{where}: depends_on names no service: {dep!r}")
        services.append(ComposeService(name, spec, context, dockerfile))
    return ComposeSpec(path, tuple(services), main_env, tuple(sorted(named)), tuple(ignored))


def compose_command() -> list[str]:
    """The Compose CLI: ``docker compose`` (the plugin) where it works, else ``docker-compose``.

    Raises :class:`TrialError` naming how to install it when there is neither."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy is not None:
        return [legacy]
    raise TrialError(
        "multi-container tasks need Docker Compose: install Debian's docker-compose "
        "(apt-get install docker-compose; scripts/setup.sh does) or the docker compose plugin"
    )


class TaskServices:
    """The services of one trial (see the module docstring): ``start`` builds and starts them,
    ``close`` removes every container, volume and the network (idempotent)."""

    def __init__(
        self,
        task: HarborTask,
        *,
        ttl_s: float,
        public: bool,
        build_timeout_s: float,
        start_timeout_s: float,
        memory_mb: int,
        cpus: float,
        pids: int,
    ) -> None:
        if task.compose is None:
            raise ValueError(f"task {task.name!r} has no compose file")
        self.task = task
        self.spec: ComposeSpec = task.compose
        self.ttl_s = ttl_s
        self.public = public
        self.build_timeout_s = build_timeout_s
        self.start_timeout_s = start_timeout_s
        self.memory_mb = memory_mb
        self.cpus = cpus
        self.pids = pids
        self.project = f"skyrl-harbor-{os.getpid()}-{os.urandom(4).hex()}"
        self.network = f"{self.project}-net"
        self._dir: str | None = None
        self._network_made = False
        self._closed = False

    # -- start ---------------------------------------------------------------------------------
    def _images(self, client: Any) -> dict[str, str]:
        from harbor_adapter.images import ensure_built, folder_tag
        from skyrl_gym.sandbox.dockerlib import find_image

        start = time.monotonic()
        images = {}
        for service in self.spec.services:
            if service.build_context is not None:
                tag = folder_tag(
                    f"{self.task.name}-{service.name}", service.build_context, service.dockerfile
                )
                budget = self.build_timeout_s - (time.monotonic() - start)
                ensure_built(
                    f"{self.task.name}/{service.name}", service.build_context, service.dockerfile, tag, budget
                )
                images[service.name] = tag
            else:
                image = str(service.spec["image"])
                if find_image(client, image) is None:
                    raise ImageBuildError(
                        f"task {self.task.name!r}: service {service.name!r} needs image {image!r}, which is "
                        "not on this machine, and no registry is reachable; give the service a build folder "
                        f"or load the image first (docker load / docker build -t {image})"
                    )
                images[service.name] = image
        return images

    def _project(self, images: Mapping[str, str]) -> dict[str, Any]:
        from skyrl_gym.sandbox.reaper import owner_labels

        labels = {**owner_labels(self.ttl_s), "harbor.task": self.task.name, "harbor.phase": "service"}
        services = {}
        for service in self.spec.services:
            spec = dict(service.spec)
            own = spec.get("labels") or {}
            if isinstance(own, list):
                own = dict(str(x).partition("=")[::2] for x in own)
            spec.update(
                image=images[service.name],
                labels={
                    **{str(k): str(v) for k, v in own.items() if not str(k).startswith("skyrl.")},
                    **labels,
                },
                networks=["task"],
                security_opt=["no-new-privileges"],
                mem_limit=f"{self.memory_mb}m",
                memswap_limit=f"{self.memory_mb}m",
                cpus=self.cpus,
                pids_limit=self.pids,
            )
            services[service.name] = spec
        return {
            "services": services,
            "networks": {"task": {"external": True, "name": self.network}},
            "volumes": {name: {"labels": labels} for name in self.spec.volumes},
        }

    def _compose(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        assert self._dir is not None
        argv = [*compose_command(), "-p", self.project, "-f", os.path.join(self._dir, "compose.json"), *args]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=self._dir)
        except subprocess.TimeoutExpired:
            raise TrialTimeoutError(
                f"task {self.task.name!r}: docker compose {args[0]} took longer than {timeout:g} s"
            ) from None

    def start(self) -> None:
        """Build the service images, make the network, start the services and wait until each
        runs (and is healthy, when it has a healthcheck). On any failure everything made so
        far is removed and the error says which service and why."""
        from skyrl_gym.sandbox.dockerlib import docker_client
        from skyrl_gym.sandbox.reaper import owner_labels

        client = docker_client()
        try:
            images = self._images(client)
            client.networks.create(
                self.network,
                driver="bridge",
                internal=not self.public,
                labels={**owner_labels(self.ttl_s), "harbor.task": self.task.name},
            )
            self._network_made = True
            self._dir = tempfile.mkdtemp(prefix="skyrl-harbor-compose-")
            Path(self._dir, "compose.json").write_text(json.dumps(self._project(images), indent=1))
            up = self._compose("up", "-d", "--no-build", "--no-color", timeout=self.start_timeout_s + 60)
            if up.returncode != 0:
                raise TrialError(
                    f"task {self.task.name!r}: docker compose up failed: {(up.stderr or up.stdout)[-2000:]}"
                )
            self._wait(client)
        except BaseException:
            self.close()
            raise

    def containers(self, client: Any = None) -> list[Any]:
        """The project's containers (running or not)."""
        from skyrl_gym.sandbox.dockerlib import docker_client

        client = client or docker_client()
        return client.containers.list(
            all=True, filters={"label": f"{PROJECT_LABEL}={self.project}"}, ignore_removed=True
        )

    def _wait(self, client: Any) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        want = {s.name: s for s in self.spec.services}
        while True:
            pending = []
            for container in self.containers(client):
                service = container.labels.get("com.docker.compose.service", "")
                if service not in want:
                    continue
                state = container.attrs.get("State") or {}
                if state.get("Status") in ("exited", "dead"):
                    logs = container.logs(tail=20).decode(errors="replace")
                    raise TrialError(
                        f"task {self.task.name!r}: service {service!r} exited with code "
                        f"{state.get('ExitCode')} before the agent started: {logs[-1500:]}"
                    )
                health = (state.get("Health") or {}).get("Status")
                if state.get("Status") != "running" or (want[service].healthcheck and health != "healthy"):
                    pending.append(f"{service} ({health or state.get('Status')})")
            seen = {c.labels.get("com.docker.compose.service") for c in self.containers(client)}
            pending += sorted(f"{name} (not created)" for name in set(want) - seen)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TrialTimeoutError(
                    f"task {self.task.name!r}: services not ready after {self.start_timeout_s:g} s: {pending}"
                )
            time.sleep(0.5)

    # -- close ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Remove the services, their volumes and the network (what compose leaves is removed
        through the daemon; the reaper takes anything left after a crash)."""
        if self._closed:
            return
        self._closed = True
        from skyrl_gym.sandbox.dockerlib import docker_client, docker_module

        if self._dir is not None:
            with contextlib.suppress(Exception):
                self._compose("down", "-v", "--remove-orphans", "-t", "1", timeout=120)
        client = docker_client()
        errors = docker_module().errors
        for container in self.containers(client):
            with contextlib.suppress(errors.NotFound, errors.APIError):
                container.remove(force=True, v=True)
        for volume in client.volumes.list(filters={"label": f"{PROJECT_LABEL}={self.project}"}):
            with contextlib.suppress(errors.NotFound, errors.APIError):
                volume.remove(force=True)
        if self._network_made:
            try:
                client.networks.get(self.network).remove()
            except errors.NotFound:
                pass
            except errors.APIError as exc:  # a container still attached: the reaper will
                log.warning("could not remove network %s: %s", self.network, exc)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __repr__(self) -> str:
        return f"TaskServices({self.task.name!r}, {self.project})"
