"""Where an instance runs: a sandbox holding the repository at ``base_commit`` in ``root``.

- ``docker``: a task-profile container (no network) of the instance's image. Images are built
  offline in two tiers, as SWE-bench does: an *env image* per (base image, environment setup)
  ``FROM skyrl-sandbox/python`` with a pytest runtime added, and an *instance image* ``FROM``
  it with the repository snapshot copied to ``/testbed`` and the ``install`` commands run.
  Both are tagged by a hash of what went into them and reused while that exists.
- ``local``: a :class:`~skyrl_gym.sandbox.LocalSandbox` (bubblewrap where it works) with the
  snapshot unpacked into its working directory and the host's ``/usr/bin/python3``.

Both get the same pytest runtime: pytest and its pure-Python dependencies copied from the
host's installed distributions into a read-only folder that comes first on ``PYTHONPATH``
(no registry is needed, and nothing the agent writes under the repository can shadow it).
"""

from __future__ import annotations

import compileall
import contextlib
import fcntl
import hashlib
import importlib.metadata
import io
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from skyrl_gym.envs.swe._repo import RepoSource, cache_dir
from skyrl_gym.envs.swe.swesmith import start_snapshot
from skyrl_gym.envs.swe.types import SWEEnvConfig, SWEInstance
from skyrl_gym.errors import MissingDependencyError, SandboxError
from skyrl_gym.sandbox import make_sandbox
from skyrl_gym.sandbox.terminal import Workspace as TerminalWorkspace
from skyrl_gym.sandbox.types import DockerProfile, MiB, SandboxLimits, SandboxSpec

__all__ = ["Workspace", "open_workspace", "pytest_runtime", "instance_image", "RUNTIME_DIR", "TESTBED"]

TESTBED = "/testbed"
#: Where the pytest runtime sits in env images.
RUNTIME_DIR = "/opt/skyrl-pytest"
_RUNTIME_DISTS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments")
_IMAGE_RECIPE = "2"
# after ``install``: what it built becomes part of the one base commit, so it is never in the diff
_SETTLE = (
    "git add -A && git -c user.name=skyrl -c user.email=skyrl@localhost "
    "commit -q --amend --no-edit --allow-empty"
)
_TAG_CHARS = re.compile(r"[^a-z0-9_.-]+")


def pytest_runtime() -> Path:
    """A folder with pytest and its dependencies, copied from this Python's distributions."""
    dists = []
    for name in _RUNTIME_DISTS:
        try:
            dists.append(importlib.metadata.distribution(name))
        except importlib.metadata.PackageNotFoundError as exc:
            raise MissingDependencyError(name, "dev", "running the tests of SWE tasks") from exc
    key = hashlib.sha256(";".join(f"{d.metadata['Name']}={d.version}" for d in dists).encode()).hexdigest()[
        :12
    ]
    out = cache_dir() / f"pytest-runtime-{key}-c"
    if out.exists():
        return out
    tmp = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=".runtime-"))
    for dist in dists:
        for file in dist.files or ():
            if file.parts[0] == ".." or "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            src = Path(dist.locate_file(file))
            if src.is_file():
                dst = tmp / file
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
    # byte-code now, so that no test run compiles pytest again (the runtime is read-only)
    compileall.compile_dir(str(tmp), quiet=2, workers=1)
    for path in [tmp, *tmp.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        os.replace(tmp, out)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _env_vars(root: str, runtime: str) -> dict[str, str]:
    return {
        "PYTHONPATH": f"{runtime}:{root}",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PIP_NO_INDEX": "1",
        "GIT_PAGER": "cat",
        "PAGER": "cat",
        "TERM": "dumb",
    }


@contextlib.contextmanager
def _build_lock():
    with open(cache_dir() / "image-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _build(client: object, tag: str, context: bytes) -> None:
    from skyrl_gym.sandbox.dockerlib import docker_module

    errors = docker_module().errors
    try:
        client.images.build(  # type: ignore[attr-defined]
            fileobj=io.BytesIO(context),
            custom_context=True,
            tag=tag,
            rm=True,
            forcerm=True,
            network_mode="none",
            pull=False,
            labels={"skyrl-swe.recipe": _IMAGE_RECIPE},
        )
    except errors.BuildError as exc:
        lines = "".join(str(chunk.get("stream", chunk.get("error", ""))) for chunk in exc.build_log)
        raise SandboxError(f"building {tag} failed: {exc}\n{lines[-3000:]}") from exc
    except errors.APIError as exc:
        raise SandboxError(f"building {tag} failed: {exc}") from exc


def _exists(client: object, ref: str) -> bool:
    from skyrl_gym.sandbox.dockerlib import find_image

    return find_image(client, ref) is not None


def env_image(instance: SWEInstance, client: object) -> str:
    """The env image of ``instance`` (built if missing): base image + pytest runtime + setup."""
    from skyrl_gym.sandbox.dockerlib import docker_module

    try:
        base_id = client.images.get(instance.image).id  # type: ignore[attr-defined]
    except docker_module().errors.ImageNotFound:
        raise SandboxError(
            f"base image {instance.image!r} not found: build it offline with `skyrl sandbox build-images`"
        ) from None
    runtime = pytest_runtime()
    digest = hashlib.sha256(
        "\n".join([_IMAGE_RECIPE, base_id, runtime.name, *instance.environment_setup]).encode()
    ).hexdigest()[:16]
    tag = f"skyrl-swe/env:{digest}"
    if _exists(client, tag):
        return tag
    lines = [f"FROM {instance.image}", f"COPY pytest {RUNTIME_DIR}"]
    for key, value in _env_vars(TESTBED, RUNTIME_DIR).items():
        lines.append(f"ENV {key}={value}")
    lines += [f"RUN {cmd}" for cmd in instance.environment_setup]
    lines.append(f"WORKDIR {TESTBED}")
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w") as tar:
        _add_bytes(tar, "Dockerfile", ("\n".join(lines) + "\n").encode())
        tar.add(runtime, arcname="pytest")
    with _build_lock():
        if not _exists(client, tag):
            _build(client, tag, bio.getvalue())
    return tag


def instance_image(instance: SWEInstance, source: RepoSource, client: object | None = None) -> str:
    """The instance image (built if missing): the env image + the repository at ``base_commit``."""
    from skyrl_gym.sandbox.dockerlib import docker_client

    client = client or docker_client()
    env_tag = env_image(instance, client)
    snapshot = start_snapshot(instance, source)
    digest = hashlib.sha256(
        "\n".join([_IMAGE_RECIPE, env_tag, snapshot.name, *instance.install]).encode()
    ).hexdigest()[:16]
    repo = "skyrl-swe/" + _TAG_CHARS.sub("-", instance.instance_id.lower()).strip("-.")[:100]
    tag = f"{repo}:{digest}"
    if _exists(client, tag):
        return tag
    lines = [f"FROM {env_tag}", f"COPY testbed {TESTBED}", f"WORKDIR {TESTBED}"]
    lines += [f"RUN {cmd}" for cmd in instance.install]
    if instance.install:
        lines.append(f"RUN {_SETTLE}")
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w") as tar, tarfile.open(snapshot) as snap:
        _add_bytes(tar, "Dockerfile", ("\n".join(lines) + "\n").encode())
        for member in snap.getmembers():
            data = snap.extractfile(member) if member.isfile() else None
            member.name = f"testbed/{member.name}"
            if member.islnk():
                member.linkname = f"testbed/{member.linkname}"
            tar.addfile(member, data)
    with _build_lock():
        if not _exists(client, tag):
            _build(client, tag, bio.getvalue())
    return tag


@dataclass
class Workspace(TerminalWorkspace):
    """A sandbox with the repository at ``base_commit`` in ``root`` (a git repo with one commit);
    ``env`` holds the environment of commands and test runs (``PYTHONPATH`` with the pytest
    runtime first)."""

    python: str = "python3"
    """The Python interpreter inside the sandbox."""


def limits_of(config: SWEEnvConfig) -> SandboxLimits:
    """Sandbox limits from the env config."""
    return SandboxLimits(
        cpus=config.cpus,
        memory_bytes=config.memory_mb * MiB,
        pids=config.pids,
        timeout_s=config.command_timeout_s,
        grace_s=2.0,
        output_bytes=4 * MiB,
        ttl_s=max(3600.0, config.test_timeout_s * 2),
    )


def open_workspace(instance: SWEInstance, source: RepoSource, config: SWEEnvConfig) -> Workspace:
    """A fresh sandbox with ``instance``'s repository at ``base_commit``."""
    limits = limits_of(config)
    if config.sandbox == "docker":
        env = {**_env_vars(TESTBED, RUNTIME_DIR), "HOME": "/root"}
        spec = SandboxSpec(
            "docker",
            limits,
            image=instance_image(instance, source),
            profile=DockerProfile.TASK,
            workdir=TESTBED,
            env=env,
            labels={"skyrl-swe.instance": instance.instance_id[:200]},
            name_prefix="skyrl-swe",
        )
        return Workspace(make_sandbox(spec), TESTBED, env, python="python3")
    runtime = str(pytest_runtime())
    sandbox = make_sandbox(SandboxSpec("local", limits, ro_paths=(runtime,), env={"HOME": "/tmp"}))
    try:
        root = sandbox.workdir
        env = _env_vars(root, runtime)
        data = start_snapshot(instance, source).read_bytes()
        result = sandbox.exec(["tar", "-x", "-m", "-f", "-"], stdin=data, timeout=120)
        if not result.ok:
            raise SandboxError(f"unpacking {instance.instance_id} failed: {result.stderr[-2000:]}")
        for cmd in (*instance.install, _SETTLE) if instance.install else ():
            result = sandbox.exec(cmd, timeout=config.test_timeout_s, env=env)
            if not result.ok:
                raise SandboxError(
                    f"install command {cmd!r} failed: {(result.stdout + result.stderr)[-2000:]}"
                )
    except BaseException:
        sandbox.close()
        raise
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
    return Workspace(sandbox, root, env, python=python)
