"""One trial of a Harbor task: image, container, agent phase, verifier phase, clean-up.

::

    with Trial(task) as trial:          # builds (cached) and starts the container, with deadlines
        trial.run("echo hi > /app/out")  # an agent command, capped by what is left of the budget
        result = trial.verify()          # VerifierResult: reward or error

The container is a :class:`~skyrl_gym.sandbox.DockerSandbox` in the *task* profile: root (or
``[agent].user``), writable filesystem, ``no-new-privileges``, the task's CPU and memory limits,
and no network unless the task's ``network_mode`` is ``public``. ``tests/`` and ``solution/``
are not in the image (the build context is ``environment/``) nor in the container while the
agent works.

The verifier phase, in order: restart the container through the daemon (every process the
agent left dies, so a background writer cannot forge the reward afterwards; files stay), remove
``/logs/verifier`` and ``/tests`` and check through the daemon that they are empty, copy
``tests/`` in, run ``tests/test.sh`` under ``[verifier].timeout_sec``, read ``reward.json`` else
``reward.txt`` through the daemon (not with the container's own, replaceable, tools).

With a separate verifier (``[verifier] environment_mode = "separate"``, a
``[verifier.environment]`` table, or a task that declares ``artifacts``; see
:meth:`~harbor_adapter.types.TaskConfig.verifier_mode`) the verifier does not trust the agent's
container at all: the daemon reads each artifact out of it (``/logs/artifacts`` and the task's
``artifacts``; regular files and directories only, permission bits without setuid/setgid,
``exclude`` patterns left out), the agent's container is removed, a fresh container starts from
the verifier's image (``[verifier.environment].docker_image``, else one built from
``tests/Dockerfile``, else the task's own), the artifacts are put back at their paths, and the
same steps run there. A binary the agent replaced (``python3``, ``grep``, the test runner) is
not in that container.

A multi-container task (``environment/docker-compose.yaml``) starts its services first with
Docker Compose on a network of the trial's own (internal unless ``network_mode = "public"``;
see :mod:`harbor_adapter.compose`); the agent's container, and a separate verifier's, join it
(the agent's as ``main``), and :meth:`Trial.close` removes the services and the network too.

A multi-step task walks its steps in the one container: :meth:`Trial.begin_step` copies the
step's ``workdir/`` into the working directory and runs its ``setup.sh`` (after clearing what a
shared verifier of the step before left in ``/tests`` and ``/logs/verifier``) and restarts the
agent clock with the step's budget; :meth:`Trial.verify` runs the step's verifier (the task's
``tests/`` with the step's ``tests/`` copied over them). A separate verifier of a step that is
not the last runs in a container of its own, removed after it; the agent's container goes on.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import logging
import posixpath
import tarfile
import threading
import time
from typing import Any

from harbor_adapter.compose import MAIN, TaskServices
from harbor_adapter.errors import RewardError, TrialError, TrialTimeoutError
from harbor_adapter.images import ensure_image, image_workdir
from harbor_adapter.reward import REWARD_JSON, REWARD_TXT, VERIFIER_DIR, parse_reward
from harbor_adapter.types import (
    ArtifactSpec,
    CollectHook,
    HarborStep,
    HarborTask,
    Healthcheck,
    TrialSettings,
    VerifierMode,
    VerifierResult,
    VerifierSection,
)
from skyrl_gym.errors import SandboxError, SandboxTimeoutError
from skyrl_gym.sandbox import make_sandbox
from skyrl_gym.sandbox.docker import DockerSandbox
from skyrl_gym.sandbox.dockerlib import docker_module
from skyrl_gym.sandbox.types import DockerProfile, ExecResult, MiB, SandboxLimits, SandboxSpec

__all__ = ["Trial", "TESTS_DIR", "ARTIFACTS_DIR"]

log = logging.getLogger(__name__)

TESTS_DIR = "/tests"
#: Harbor's conventional publish folder of the agent: always carried to a separate verifier.
ARTIFACTS_DIR = "/logs/artifacts"
#: Largest artifact (its tar archive) carried to a separate verifier; a larger one is left out.
ARTIFACT_MAX_BYTES = 256 * 1024 * 1024
_PREPARE = f"rm -rf {VERIFIER_DIR} {TESTS_DIR} && mkdir -p {VERIFIER_DIR} {TESTS_DIR}"
# an agent command runs in bash where the image has it, else in sh
_SHELL = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; else exec sh -c "$1"; fi'
_SETUP = 'if command -v bash >/dev/null 2>&1; then exec bash "$1" 2>&1; else exec sh "$1" 2>&1; fi'
# a collect hook in main as another user (util-linux's runuser, in Debian-based images)
_AS_USER = 'command -v runuser >/dev/null 2>&1 || { echo "runuser is not in the image" >&2; exit 127; }; exec runuser -u "$1" -- /bin/sh -c "$2"'
#: Largest verifier file read back (reward files, the test output).
_READ_MAX = 1024 * 1024


class Trial:
    """A task's container and its two phases. Not thread-safe; one per episode.

    Construction does nothing heavy; :meth:`start` builds and starts (``with Trial(...)`` calls
    it). Every step has a deadline: the build (``build_timeout_sec``), the container start
    (``start_timeout_s``), each agent command (``command_timeout_s`` and the agent budget), and
    the verifier (``[verifier].timeout_sec``)."""

    def __init__(self, task: HarborTask, settings: TrialSettings | None = None) -> None:
        self.task = task
        self.settings = settings or TrialSettings()
        self.sandbox: DockerSandbox | None = None
        self.image: str | None = None
        self.workdir = "/"
        self.build_seconds = 0.0
        self.start_seconds = 0.0
        self.agent_started: float | None = None
        self.agent_ended: float | None = None
        self.commands = 0
        self.step: HarborStep | None = None
        self.services: TaskServices | None = None
        self._closed = False
        self._tests_left = False  # a shared verifier ran: /tests and /logs/verifier hold its files

    # -- budgets -------------------------------------------------------------------------------
    @property
    def agent_budget_s(self) -> float:
        """Seconds the agent phase (of the current step) may take."""
        if self.settings.agent_timeout_s is not None:
            return self.settings.agent_timeout_s
        if self.step is not None:
            return self.step.config.agent.budget_s
        return self.task.config.agent.budget_s

    @property
    def verifier(self) -> VerifierSection:
        """The ``[verifier]`` that applies now: the current step's, else the task's."""
        if self.step is not None and self.step.config.verifier is not None:
            return self.step.config.verifier
        return self.task.config.verifier

    @property
    def verifier_timeout_s(self) -> float:
        """Deadline of ``tests/test.sh``."""
        return self.settings.verifier_timeout_s or self.verifier.timeout_sec

    def agent_time_left(self) -> float:
        """Seconds left of the agent phase (its clock starts when the container is up)."""
        if self.agent_started is None:
            return self.agent_budget_s
        return self.agent_budget_s - (time.monotonic() - self.agent_started)

    # -- life cycle ----------------------------------------------------------------------------
    def limits(self) -> SandboxLimits:
        """The container's limits, from ``[environment]`` and the settings."""
        env = self.task.config.environment
        phases = self.agent_budget_s + self.verifier_timeout_s
        if self.task.steps:
            phases = 0.0
            for step in self.task.steps:
                verifier = step.config.verifier or self.task.config.verifier
                phases += (
                    (self.settings.agent_timeout_s or step.config.agent.budget_s)
                    + (self.settings.verifier_timeout_s or verifier.timeout_sec)
                    + 60.0
                )
        life = (
            (self.settings.build_timeout_s or env.build_timeout_sec)
            + self.settings.start_timeout_s
            + phases
            + 300
        )
        storage = env.storage_mb * MiB if env.storage_mb else 4096 * MiB
        return SandboxLimits(
            cpus=env.cpus,
            memory_bytes=env.memory_mb * MiB,
            pids=self.settings.pids,
            timeout_s=self.settings.command_timeout_s,
            grace_s=2.0,
            output_bytes=max(64 * 1024, self.settings.output_chars * 4),
            file_size_bytes=storage,
            ttl_s=life,
        )

    def start(self) -> None:
        """Build the image (cached) and start the container; the agent clock starts then."""
        if self._closed:
            raise TrialError("this trial is closed; make a new one")
        if self.sandbox is not None:
            return
        self.image, _, self.build_seconds = ensure_image(self.task, deadline_s=self.settings.build_timeout_s)
        self.workdir = self.task.config.environment.workdir or image_workdir(self.image)
        t0 = time.monotonic()
        if self.task.compose is not None and self.task.compose.services:
            self.services = self._start_services()
        try:
            sandbox = self._start_container(self.image, self.task.config.agent.user, phase="agent")
        except BaseException:
            self._close_services()
            raise
        if self._closed:  # closed from another thread while the container started
            sandbox.close()
            self._close_services()
            raise TrialError("the trial was closed while its container started")
        self.sandbox = sandbox
        self.start_seconds = time.monotonic() - t0
        with contextlib.suppress(SandboxError):  # Harbor's layout: the agent may log to /logs/agent
            self.sandbox.exec(f"mkdir -p /logs/agent {ARTIFACTS_DIR} {VERIFIER_DIR}", timeout=30, workdir="/")
        check = self.task.config.environment.healthcheck
        if check is not None:
            try:
                self._run_healthcheck(check, "the environment's")
            except BaseException:
                self.close()  # a failed start leaves nothing behind (``with`` never calls __exit__)
                raise
        self.agent_started = time.monotonic()

    def _start_services(self) -> TaskServices:
        env = self.task.config.environment
        services = TaskServices(
            self.task,
            ttl_s=self.limits().ttl_s,
            public=env.network,
            build_timeout_s=self.settings.build_timeout_s or env.build_timeout_sec,
            start_timeout_s=self.settings.start_timeout_s,
            memory_mb=env.memory_mb,
            cpus=env.cpus,
            pids=self.settings.pids,
        )
        services.start()
        return services

    def _close_services(self) -> None:
        services, self.services = self.services, None
        if services is not None:
            services.close()

    def _start_container(self, image: str, user: str | int | None, *, phase: str) -> DockerSandbox:
        env = self.task.config.environment
        compose_env = self.task.compose.main_environment if self.task.compose is not None else {}
        on_network = {}
        if self.services is not None:  # the task's own network, where the services are
            aliases = (MAIN,) if phase == "agent" else ()
            on_network = {"network_name": self.services.network, "network_aliases": aliases}
        spec = SandboxSpec(
            "docker",
            self.limits(),
            image=image,
            profile=DockerProfile.TASK,
            network=env.network and self.services is None,
            workdir=self.workdir,
            env={"HOME": "/root", **env.env, **compose_env},
            **on_network,
            user=None if user is None else str(user),
            labels={"harbor.task": self.task.name, "harbor.phase": phase},
            name_prefix="skyrl-harbor",
            start_timeout_s=self.settings.start_timeout_s,
        )
        try:
            sandbox = make_sandbox(spec)
        except SandboxTimeoutError as exc:
            raise TrialTimeoutError(
                f"task {self.task.name!r}: starting the {phase} container took longer than {spec.start_timeout_s:g} s"
            ) from exc
        assert isinstance(sandbox, DockerSandbox)
        return sandbox

    @property
    def verifier_mode(self) -> VerifierMode:
        """Where this trial's (current step's) verifier runs: the task's mode under the settings."""
        config = self.step.config if self.step is not None else None
        return self.task.config.verifier_mode(self.settings.verifier_mode, config)

    # -- steps ---------------------------------------------------------------------------------
    def begin_step(self, step: HarborStep) -> None:
        """Make ``step`` the current one: clear a shared verifier's leftovers (checked through
        the daemon), copy the step's ``workdir/`` into the working directory, run its
        ``setup.sh`` there, and restart the agent clock with the step's budget. A failing
        ``setup.sh`` is a :class:`TrialError` (the task's fault, never the agent's)."""
        box = self._box()
        if self._tests_left:
            self._empty_verifier_dirs(box, f"before step {step.name!r}")
            self._tests_left = False
        self.step = step
        if step.workdir_dir.is_dir():
            box.upload(step.workdir_dir, self.workdir)
        if step.setup_script.is_file():
            setup = box.exec(
                ["/bin/sh", "-c", _SETUP, "setup", posixpath.join(self.workdir, "setup.sh")],
                timeout=self.settings.command_timeout_s,
            )
            if not setup.ok:
                why = "ran past its deadline" if setup.timed_out else f"exited {setup.exit_code}"
                raise TrialError(
                    f"task {self.task.name!r}, step {step.name!r}: workdir/setup.sh {why}: {setup.stdout[-500:]}"
                )
        if step.config.healthcheck is not None:
            self._run_healthcheck(step.config.healthcheck, f"step {step.name!r}'s")
        self.agent_started = time.monotonic()
        self.agent_ended = None

    def _run_healthcheck(self, check: Healthcheck, whose: str) -> None:
        """Run ``check`` in the agent's container until it passes, by Docker HEALTHCHECK's rules
        (failures in the start period do not count; ``retries`` consecutive failures after it
        fail); a failure is a :class:`TrialError` (the task's: the episode is masked)."""
        box = self._box()
        start = time.monotonic()
        failures = 0
        while True:
            result = box.exec(
                ["/bin/sh", "-c", check.command], timeout=check.timeout_sec, workdir=self.workdir
            )
            if result.ok:
                return
            if time.monotonic() - start < check.start_period_sec:
                time.sleep(check.start_interval_sec)
                continue
            failures += 1
            if failures > check.retries:
                out = (result.stdout + result.stderr)[-500:]
                why = "ran past its deadline" if result.timed_out else f"exited {result.exit_code}"
                raise TrialError(
                    f"task {self.task.name!r}: {whose} healthcheck {check.command!r} failed {failures} times "
                    f"in a row (last: {why}): {out}"
                )
            time.sleep(check.interval_sec)

    def close(self) -> None:
        """Remove the container (and a multi-container task's services and network). Idempotent."""
        self._closed = True
        sandbox, self.sandbox = self.sandbox, None
        try:
            if sandbox is not None:
                sandbox.close()
        finally:
            self._close_services()

    def __enter__(self) -> Trial:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _box(self) -> DockerSandbox:
        if self.sandbox is None:
            raise TrialError("the trial has not started; call start() first")
        return self.sandbox

    # -- agent phase ---------------------------------------------------------------------------
    def run(self, command: str, *, timeout: float | None = None) -> ExecResult:
        """Run an agent command (``bash -c``, or ``sh -c`` without bash) in the working directory. Its deadline is the
        smallest of ``timeout``, ``command_timeout_s`` and the agent time left; past the agent
        budget it raises :class:`TrialTimeoutError` without running."""
        box = self._box()
        if self.agent_ended is not None:
            raise TrialError("the agent phase is over")
        left = self.agent_time_left()
        if left <= 0:
            raise TrialTimeoutError(f"the agent phase's budget of {self.agent_budget_s:g} s is spent")
        limit = min(self.settings.command_timeout_s, left, timeout or float("inf"))
        self.commands += 1
        return box.exec(["/bin/sh", "-c", _SHELL, "agent-command", command], timeout=max(limit, 0.1))

    def end_agent_phase(self) -> None:
        """Stop the agent's clock (idempotent)."""
        if self.agent_ended is None:
            self.agent_ended = time.monotonic()

    @property
    def agent_seconds(self) -> float:
        """Seconds the agent phase took (so far)."""
        if self.agent_started is None:
            return 0.0
        return (self.agent_ended or time.monotonic()) - self.agent_started

    # -- verifier phase ------------------------------------------------------------------------
    def verify(self, *, last: bool = True) -> VerifierResult:
        """Run the verifier (of the current step) once and return its result; a result with
        ``error`` set when there is no usable reward (never a 0 in its place). ``last=False``
        (a step other than the last): the agent's container stays for the next step."""
        box = self._box()
        self.end_agent_phase()
        t0 = time.monotonic()
        self._collect_hooks(box)
        if self.verifier_mode is VerifierMode.SEPARATE:
            if last:
                box = self._separate_verifier(box)
                return self._run_tests(box, t0)
            verifier_box = self._separate_verifier(box, keep_agent=True)
            try:
                return self._run_tests(verifier_box, t0)
            finally:
                verifier_box.close()
        # Every process the agent started dies: the daemon restarts the container (its files
        # stay). A background writer cannot touch the reward afterwards.
        try:
            box.container.restart(timeout=0)
        except Exception as exc:  # noqa: BLE001 - the daemon's error types vary
            raise TrialError(
                f"could not restart {self.task.name!r}'s container for the verifier: {exc}"
            ) from exc
        self._tests_left = True
        self._put_service_artifacts(box)
        return self._run_tests(box, t0)

    # -- what the verifier gets: its image, collect hooks, service artifacts -----------------------
    def _verifier_image(self) -> str:
        """The separate verifier's image, as Harbor picks it: ``[verifier.environment]
        .docker_image`` (the step's, else the task's), else one built from a ``Dockerfile`` in
        the step's ``tests/``, else in the task's ``tests/`` (offline, content-hash tagged, under
        ``build_timeout_sec``), else the task's own image."""
        from harbor_adapter.images import ensure_built, folder_tag

        if self.verifier.docker_image:
            return self.verifier.docker_image
        folders = [self.step.tests_dir] if self.step is not None else []
        for folder in (*folders, self.task.tests_dir):
            if (folder / "Dockerfile").is_file():
                tag = folder_tag(f"{self.task.name}-verifier", folder)
                env = self.task.config.environment
                budget = self.settings.build_timeout_s or env.build_timeout_sec
                ensure_built(f"{self.task.name} (verifier)", folder, "Dockerfile", tag, budget)
                return tag
        assert self.image is not None
        return self.image

    def _service_container(self, name: str) -> Any:
        if self.services is None:
            raise TrialError(f"task {self.task.name!r}: service {name!r} is not running (no services)")
        for container in self.services.containers():
            if container.labels.get("com.docker.compose.service") == name:
                return container
        raise TrialError(f"task {self.task.name!r}: service {name!r} is not running")

    def _collect_hooks(self, box: DockerSandbox) -> None:
        """Run ``[[verifier.collect]]``: the hooks in ``main`` first, then (every process of the
        agent killed by a restart, so nothing it left running races them) those in services.
        A hook that fails or runs past its deadline is a :class:`TrialError` (the task's)."""
        hooks = self.task.config.verifier.collect
        for hook in (h for h in hooks if h.service == MAIN):
            argv = ["/bin/sh", "-c", hook.command]
            if hook.user is not None:  # the container runs as the agent's user; switch for the hook
                argv = ["/bin/sh", "-c", _AS_USER, "collect", str(hook.user), hook.command]
            result = box.exec(argv, timeout=hook.timeout_sec, workdir=self.workdir)
            if not result.ok:
                why = "ran past its deadline" if result.timed_out else f"exited {result.exit_code}"
                raise TrialError(
                    f"task {self.task.name!r}: collect hook {hook.command!r} {why}: {result.stderr[-500:]}"
                )
        service_hooks = [h for h in hooks if h.service != MAIN]
        if not service_hooks:
            return
        try:
            box.container.restart(timeout=0)
        except Exception as exc:  # noqa: BLE001 - the daemon's error types vary
            raise TrialError(f"could not stop the agent's processes in {self.task.name!r}: {exc}") from exc
        for hook in service_hooks:
            _exec_in(self._service_container(hook.service), hook, self.task.name)

    def _service_artifacts(self) -> list[tuple[str, bytes | None]]:
        specs = [*self.task.config.artifacts, *(self.step.config.artifacts if self.step is not None else ())]
        return [
            (spec.source, _collect_artifact(self._service_container(spec.service), spec))
            for spec in specs
            if spec.service != MAIN
        ]

    def _put_service_artifacts(self, box: DockerSandbox) -> None:
        """A shared verifier finds the services' artifacts at their paths in ``main``."""
        _put_artifacts(box, self._service_artifacts(), self.task.name)

    def _empty_verifier_dirs(self, box: DockerSandbox, when: str) -> None:
        """Empty ``/logs/verifier`` and ``/tests``, checked through the daemon (not with the
        container's own, replaceable, tools); a :class:`TrialError` when they stay full."""
        prep = box.exec(["/bin/sh", "-c", _PREPARE], timeout=30, workdir="/")
        if (
            prep.timed_out
            or _daemon_entries(box, VERIFIER_DIR) != []
            or _daemon_entries(box, TESTS_DIR) != []
        ):
            raise TrialError(
                f"could not empty {VERIFIER_DIR} and {TESTS_DIR} {when} in {self.task.name!r}: {prep.stderr[-500:]}"
            )

    def _run_tests(self, box: DockerSandbox, t0: float) -> VerifierResult:
        """Empty the verifier's folders (checked through the daemon), copy the tests in (the
        task's ``tests/``, then the step's over them), run ``test.sh`` and read the reward."""
        self._empty_verifier_dirs(box, "for the verifier")
        if self.task.tests_dir.is_dir():
            box.upload(self.task.tests_dir, TESTS_DIR)
        if self.step is not None and self.step.tests_dir.is_dir():
            box.upload(self.step.tests_dir, TESTS_DIR)
        run = box.exec(
            [
                "/bin/sh",
                "-c",
                f"chmod +x {TESTS_DIR}/test.sh; {TESTS_DIR}/test.sh > {VERIFIER_DIR}/test-stdout.txt 2>&1",
            ],
            timeout=self.verifier_timeout_s,
            env=dict(self.verifier.env),
        )
        try:
            output = _daemon_read(box, f"{VERIFIER_DIR}/test-stdout.txt") or b""
        except RewardError:
            output = b""
        tail = output.decode("utf-8", "replace")[-2000:]
        seconds = time.monotonic() - t0
        if run.timed_out:
            return VerifierResult(
                None,
                error=f"the verifier ran past [verifier].timeout_sec={self.verifier_timeout_s:g}s",
                exit_code=run.exit_code,
                timed_out=True,
                seconds=seconds,
                output=tail,
            )
        try:
            reward, metrics = parse_reward(_daemon_read(box, REWARD_JSON), _daemon_read(box, REWARD_TXT))
        except RewardError as exc:
            return VerifierResult(None, error=str(exc), exit_code=run.exit_code, seconds=seconds, output=tail)
        return VerifierResult(reward, metrics, exit_code=run.exit_code, seconds=seconds, output=tail)

    def _separate_verifier(self, agent_box: DockerSandbox, *, keep_agent: bool = False) -> DockerSandbox:
        """Carry the artifacts out of the agent's container and start the verifier's container
        with the artifacts at their paths. Unless ``keep_agent``, the agent's container is
        removed first and the new one becomes the trial's; otherwise the caller closes it."""
        step_artifacts = self.step.config.artifacts if self.step is not None else ()
        specs = [ArtifactSpec(ARTIFACTS_DIR)]
        for spec in (*self.task.config.artifacts, *step_artifacts):
            if spec.source not in {s.source for s in specs}:
                specs.append(spec)
        carried = [
            (spec.source, _collect_artifact(agent_box.container, spec))
            for spec in specs
            if spec.service == MAIN
        ]
        carried += self._service_artifacts()
        if not keep_agent:
            self.sandbox = None
            agent_box.close()  # the agent's processes and files go with it
        image = self._verifier_image()
        box = self._start_container(image, self.verifier.user, phase="verifier")
        if not keep_agent:
            self.sandbox = box
        try:
            _put_artifacts(box, carried, self.task.name)
        except BaseException:
            if keep_agent:  # not the trial's container: nothing else would remove it
                box.close()
            raise
        return box


def _put_artifacts(box: DockerSandbox, carried: list[tuple[str, bytes | None]], task: str) -> None:
    """Put each artifact (a tar from :func:`_collect_artifact`) at its path in ``box``."""
    for source, data in carried:
        if data is None:
            continue
        parent = posixpath.dirname(source) or "/"
        made = box.exec(["mkdir", "-p", parent], timeout=30, workdir="/")
        if not made.ok or not box.container.put_archive(parent, data):
            raise TrialError(f"could not put artifact {source} into {task!r}'s verifier container")


def _exec_in(container: Any, hook: CollectHook, task: str) -> None:
    """Run a collect hook in a service's container under its deadline (the exec runs in a
    thread: the SDK's exec has no deadline of its own)."""
    done: list[Any] = []

    def run() -> None:
        try:
            user = "" if hook.user is None else str(hook.user)
            done.append(container.exec_run(["/bin/sh", "-c", hook.command], user=user))
        except Exception as exc:  # noqa: BLE001 - reported below
            done.append(exc)

    thread = threading.Thread(target=run, name=f"harbor-collect-{task}", daemon=True)
    thread.start()
    thread.join(hook.timeout_sec)
    if not done:
        raise TrialTimeoutError(
            f"task {task!r}: collect hook {hook.command!r} ran past {hook.timeout_sec:g} s"
        )
    result = done[0]
    if isinstance(result, Exception):
        raise TrialError(f"task {task!r}: collect hook {hook.command!r} could not run: {result}")
    if result.exit_code != 0:
        out = (result.output or b"").decode("utf-8", "replace")[-500:]
        raise TrialError(f"task {task!r}: collect hook {hook.command!r} exited {result.exit_code}: {out}")


def _collect_artifact(container: Any, spec: ArtifactSpec) -> bytes | None:
    """``spec.source`` as the daemon reads it out of a container (the agent's or a service's),
    repacked with only regular files and directories (no links, devices or fifos), permission
    bits only (no setuid/setgid/sticky), without the ``exclude`` patterns; None when it does not
    exist or is larger than :data:`ARTIFACT_MAX_BYTES` (the verifier then finds it missing)."""
    try:
        stream, _ = container.get_archive(spec.source)
    except docker_module().errors.NotFound:
        return None
    buf = io.BytesIO()
    for chunk in stream:
        buf.write(chunk)
        if buf.tell() > ARTIFACT_MAX_BYTES:
            log.warning("artifact %s is larger than %d bytes; left out", spec.source, ARTIFACT_MAX_BYTES)
            return None
    buf.seek(0)
    out = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="r:") as src, tarfile.open(fileobj=out, mode="w:") as dst:
        members = src.getmembers()
        top = members[0].name if members else ""
        for m in members:
            rel = m.name[len(top) + 1 :] if m.name.startswith(top + "/") else ""
            if rel and any(
                fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(posixpath.basename(rel), p) for p in spec.exclude
            ):
                continue
            if not (m.isfile() or m.isdir()):
                continue
            m.mode &= 0o777
            m.uname = m.gname = ""
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
    return out.getvalue()


def _archive(box: DockerSandbox, path: str) -> tarfile.TarFile | None:
    """``path`` as the daemon reads it from the container's filesystem (no process inside the
    container is involved), or None when it does not exist."""
    try:
        stream, _ = box.container.get_archive(path)
    except docker_module().errors.NotFound:
        return None
    buf = io.BytesIO()
    for chunk in stream:
        buf.write(chunk)
        if buf.tell() > 4 * _READ_MAX:
            raise RewardError(f"{path} is larger than {4 * _READ_MAX} bytes")
    buf.seek(0)
    return tarfile.open(fileobj=buf, mode="r:")


def _daemon_entries(box: DockerSandbox, path: str) -> list[str] | None:
    """The names inside directory ``path`` (None when it is missing or not a directory)."""
    tar = _archive(box, path)
    if tar is None:
        return None
    members = tar.getmembers()
    if not members or not members[0].isdir():
        return None
    return [m.name for m in members[1:]]


def _daemon_read(box: DockerSandbox, path: str) -> bytes | None:
    """The bytes of file ``path`` read by the daemon, None when it does not exist; a link or a
    directory there is a :class:`RewardError`."""
    tar = _archive(box, path)
    if tar is None:
        return None
    member = tar.getmembers()[0]
    if not member.isfile():
        raise RewardError(f"{path} is not a regular file")
    if member.size > _READ_MAX:
        raise RewardError(f"{path} is {member.size} bytes, more than {_READ_MAX}")
    data = tar.extractfile(member)
    return data.read() if data is not None else b""
