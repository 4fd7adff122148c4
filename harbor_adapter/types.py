"""Data types of the Harbor adapter: a task's config (``task.toml``), the task itself, and what a
trial yields.

A Harbor task is a directory::

    task.toml              # [agent] / [verifier] timeouts, [environment] image and limits
    instruction.md         # what the agent reads
    environment/Dockerfile # the container (or [environment].docker_image)
    tests/test.sh          # the verifier: writes /logs/verifier/reward.json or reward.txt
    solution/solve.sh      # the oracle

A multi-step task (``[[steps]]`` in ``task.toml``) replaces the root ``instruction.md``,
``tests/`` and ``solution/`` with one folder per step, walked in order in one container::

    steps/<name>/instruction.md     # the step's instruction (an observation when it begins)
    steps/<name>/tests/test.sh      # the step's verifier, over the task's tests/ (optional)
    steps/<name>/solution/solve.sh  # the step's oracle (optional: the task's solution/)
    steps/<name>/workdir/           # copied into the working directory as the step begins;
                                    # its setup.sh runs then (optional)

The field names follow Harbor's own ``TaskConfig`` (schema 1.x); keys Harbor knows but this
adapter does not act on are accepted and kept in ``ignored``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from skyrl_gym.errors import ConfigError

__all__ = [
    "NetworkMode",
    "VerifierMode",
    "RewardStrategy",
    "StepConfig",
    "Healthcheck",
    "HarborStep",
    "ArtifactSpec",
    "CollectHook",
    "AgentSection",
    "VerifierSection",
    "EnvironmentSection",
    "SolutionSection",
    "TaskConfig",
    "HarborTask",
    "ComposeService",
    "ComposeSpec",
    "VerifierResult",
    "TrialOutcome",
    "TrialSettings",
    "DEFAULT_AGENT_TIMEOUT_S",
]

#: Agent budget when ``[agent].timeout_sec`` is not set (Harbor leaves it to the agent).
DEFAULT_AGENT_TIMEOUT_S = 600.0


class NetworkMode(StrEnum):
    """Network of the task container (Harbor's ``[environment].network_mode``)."""

    PUBLIC = "public"
    """A normal bridged network."""
    NO_NETWORK = "no-network"
    """No network at all (Docker ``--network none``); works offline."""
    ALLOWLIST = "allowlist"
    """Only ``allowed_hosts``. Enforcing a host filter needs a proxy image from a registry, so
    this adapter runs such tasks without a network and says so (see decision 0012)."""


def _positive(name: str, value: float | None) -> None:
    if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class AgentSection:
    """``[agent]``: the agent phase."""

    timeout_sec: float | None = None
    """Wall-clock budget of the whole agent phase; ``None``: :data:`DEFAULT_AGENT_TIMEOUT_S`."""
    user: str | int | None = None
    """User the agent's commands run as (default: the image's, usually root)."""

    def __post_init__(self) -> None:
        _positive("[agent].timeout_sec", self.timeout_sec)

    @property
    def budget_s(self) -> float:
        """The agent phase's budget in seconds."""
        return float(self.timeout_sec) if self.timeout_sec is not None else DEFAULT_AGENT_TIMEOUT_S


class VerifierMode(StrEnum):
    """Where ``tests/test.sh`` runs (Harbor's ``[verifier].environment_mode``)."""

    SHARED = "shared"
    """In the agent's container, after the agent's processes are killed."""
    SEPARATE = "separate"
    """In a fresh container; only the task's ``artifacts`` are carried over from the agent's."""


@dataclass(frozen=True)
class ArtifactSpec:
    """One entry of ``artifacts``: a file or directory the agent leaves for the verifier."""

    source: str
    """Absolute path in the agent's container; the verifier finds it at the same path."""
    exclude: tuple[str, ...] = ()
    """Glob patterns (relative to ``source``) left out of a directory."""
    service: str = "main"
    """The container it is read from: ``main`` (the agent's) or a service of the task's
    ``docker-compose.yaml``; the verifier finds it at ``source`` in its own container."""


@dataclass(frozen=True)
class CollectHook:
    """``[[verifier.collect]]``: a command run in a container after the agent's turn ends and
    before the artifacts are read (to snapshot a service's state into a file, say)."""

    command: str
    """Shell command (``sh -c``)."""
    service: str = "main"
    """Where it runs: ``main`` (the agent's container, its processes already killed when the
    verifier shares it) or a service of the task's compose file."""
    timeout_sec: float = 60.0
    """Deadline of the command."""
    user: str | int | None = None
    """User it runs as; None keeps the container's."""


@dataclass(frozen=True)
class VerifierSection:
    """``[verifier]``: the verifier phase."""

    timeout_sec: float = 600.0
    """Deadline of ``tests/test.sh`` (Harbor's default: 600 s)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables of the test run."""
    user: str | int | None = None
    """User the verifier runs as (default: root)."""
    environment_mode: VerifierMode | None = None
    """``environment_mode`` as the task states it (a ``[verifier.environment]`` table implies
    ``separate``); None when the task says nothing (see :meth:`TaskConfig.verifier_mode`)."""
    docker_image: str | None = None
    """``[verifier.environment].docker_image``: a ready image for the separate verifier; None
    runs it from the task's own image."""
    collect: tuple[CollectHook, ...] = ()
    """``[[verifier.collect]]`` hooks, in order."""

    def __post_init__(self) -> None:
        _positive("[verifier].timeout_sec", self.timeout_sec)


class RewardStrategy(StrEnum):
    """How a multi-step task's reward follows from its steps' (``multi_step_reward_strategy``)."""

    MEAN = "mean"
    """The mean over the steps that ran, per reward key (a key a step lacks counts 0); Harbor's
    default."""
    FINAL = "final"
    """The last step that ran."""


@dataclass(frozen=True)
class Healthcheck:
    """``[environment.healthcheck]`` / ``[steps.healthcheck]``: a command that must pass in the
    agent's container before the agent (of the task, or of the step) starts, with Docker
    HEALTHCHECK's rules: failures in the start period do not count; past it, the check fails
    after ``retries`` consecutive failures."""

    command: str
    """Shell command; exit 0 is healthy."""
    interval_sec: float = 5.0
    """Seconds between attempts after the start period."""
    timeout_sec: float = 30.0
    """Deadline of one attempt."""
    start_period_sec: float = 0.0
    """Grace period from the first attempt during which failures do not count."""
    start_interval_sec: float = 5.0
    """Seconds between attempts in the start period."""
    retries: int = 3
    """Consecutive failures (after the start period) that fail the check."""


@dataclass(frozen=True)
class StepConfig:
    """One ``[[steps]]`` table: a step's name, budgets and gate."""

    name: str
    """The step's folder under ``steps/``."""
    agent: AgentSection = field(default_factory=AgentSection)
    """``[steps.agent]``: ``timeout_sec`` is the step's agent budget (the task's when unset)."""
    verifier: VerifierSection | None = None
    """``[steps.verifier]``; None keeps the task's ``[verifier]``. Its unset keys take the
    task's values (the loader fills them in)."""
    min_reward: float | Mapping[str, float] | None = None
    """Stop after this step when its reward is below this (a number gates ``reward``; a table
    gates each named key, a missing key failing)."""
    artifacts: tuple[ArtifactSpec, ...] = ()
    """More artifacts for this step's separate verifier (besides the task's)."""
    healthcheck: Healthcheck | None = None
    """``[steps.healthcheck]``: must pass after the step's ``setup.sh``, before its agent turn."""

    def gate_failure(self, metrics: Mapping[str, float]) -> str | None:
        """Why ``metrics`` (the step's reward values) miss :attr:`min_reward`; None when they
        pass or there is no gate."""
        if self.min_reward is None:
            return None
        gates = {"reward": self.min_reward} if isinstance(self.min_reward, (int, float)) else self.min_reward
        for key, floor in gates.items():
            value = metrics.get(key, float("-inf"))
            if value < floor:
                return f"step {self.name!r}: {key}={value:g} is below min_reward {floor:g}"
        return None


@dataclass(frozen=True)
class EnvironmentSection:
    """``[environment]``: the container."""

    healthcheck: Healthcheck | None = None
    """``[environment.healthcheck]``: must pass once the container is up, before the agent."""

    docker_image: str | None = None
    """A ready image; when set, ``environment/Dockerfile`` is optional (no registry is pulled)."""
    build_timeout_sec: float = 600.0
    """Deadline of building the image (Harbor's default: 600 s)."""
    cpus: float = 1.0
    """CPU quota in CPUs."""
    memory_mb: int = 2048
    """Memory limit (no swap); a process over it is killed."""
    storage_mb: int | None = None
    """Disk the task may use. Docker cannot cap a container's writable layer on overlayfs
    without xfs project quotas, so this caps the size of any one file instead."""
    gpus: int = 0
    """GPUs; only 0 is supported."""
    network_mode: NetworkMode = NetworkMode.NO_NETWORK
    """Network of the container. Unset (and no ``allow_internet``): no network."""
    allowed_hosts: tuple[str, ...] = ()
    """Hosts reachable in ``allowlist`` mode."""
    allow_internet: bool | None = None
    """The older spelling: ``true`` means ``public``, ``false`` ``no-network``; an explicit
    ``network_mode`` wins."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables of every command in the container."""
    workdir: str | None = None
    """Working directory of commands; default: the image's ``WORKDIR``."""
    os: str = "linux"
    """Only ``linux`` is supported."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "network_mode", NetworkMode(self.network_mode))
        object.__setattr__(self, "allowed_hosts", tuple(self.allowed_hosts))
        _positive("[environment].build_timeout_sec", self.build_timeout_sec)
        _positive("[environment].cpus", self.cpus)
        _positive("[environment].memory_mb", self.memory_mb)
        _positive("[environment].storage_mb", self.storage_mb)
        if self.memory_mb < 16:
            raise ConfigError(f"[environment].memory_mb={self.memory_mb} is below 16; nothing runs")
        if self.workdir is not None and not self.workdir.startswith("/"):
            raise ConfigError(f"[environment].workdir must be absolute, got {self.workdir!r}")

    @property
    def network(self) -> bool:
        """True when the container gets a network (only ``public``)."""
        return self.network_mode is NetworkMode.PUBLIC


@dataclass(frozen=True)
class SolutionSection:
    """``[solution]``: the oracle."""

    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables of ``solve.sh``."""


@dataclass(frozen=True)
class TaskConfig:
    """A parsed ``task.toml``."""

    agent: AgentSection = field(default_factory=AgentSection)
    """``[agent]``."""
    verifier: VerifierSection = field(default_factory=VerifierSection)
    """``[verifier]``."""
    environment: EnvironmentSection = field(default_factory=EnvironmentSection)
    """``[environment]``."""
    solution: SolutionSection = field(default_factory=SolutionSection)
    """``[solution]``."""
    schema_version: str = "1.0"
    """``schema_version`` (or the older ``version``)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """``[metadata]``: free-form (difficulty, category, tags...)."""
    name: str | None = None
    """``[task].name`` when the task declares one."""
    ignored: tuple[str, ...] = ()
    """Keys Harbor knows that this adapter does not act on (``mcp_servers``, ``skills_dir``...)."""
    artifacts: tuple[ArtifactSpec, ...] = ()
    """``artifacts``: what a separate verifier gets from the agent's container (besides
    ``/logs/artifacts``, which it always gets)."""
    steps: tuple[StepConfig, ...] = ()
    """``[[steps]]``, in order; empty for a single-step task."""
    reward_strategy: RewardStrategy = RewardStrategy.MEAN
    """``multi_step_reward_strategy`` (multi-step tasks only)."""

    def verifier_mode(self, setting: str = "auto", step: StepConfig | None = None) -> VerifierMode:
        """Where the verifier runs under :attr:`TrialSettings.verifier_mode` ``setting``:
        ``shared``/``separate`` force it; ``auto`` takes the task's stated mode, else
        ``separate`` when the task declares artifacts (the files its tests read), else
        ``shared``. A step's own ``[steps.verifier].environment_mode`` comes before the task's."""
        if setting != "auto":
            return VerifierMode(setting)
        if step is not None and step.verifier is not None and step.verifier.environment_mode is not None:
            return step.verifier.environment_mode
        if self.verifier.environment_mode is not None:
            return self.verifier.environment_mode
        artifacts = self.artifacts or (step.artifacts if step is not None else ())
        return VerifierMode.SEPARATE if artifacts else VerifierMode.SHARED


@dataclass(frozen=True)
class TrialSettings:
    """How this adapter runs a trial (the runner's choices; the task's own limits come from
    ``task.toml``). Pickles; set through ``env_config`` of the ``harbor`` env."""

    command_timeout_s: float = 120.0
    """Deadline of one agent command (``bash`` tool call); also capped by what is left of the
    agent phase's budget."""
    agent_timeout_s: float | None = None
    """Override ``[agent].timeout_sec`` (e.g. shorter for training); ``None`` keeps the task's."""
    verifier_timeout_s: float | None = None
    """Override ``[verifier].timeout_sec``; ``None`` keeps the task's."""
    build_timeout_s: float | None = None
    """Override ``[environment].build_timeout_sec``; ``None`` keeps the task's."""
    start_timeout_s: float = 60.0
    """Deadline of creating and starting the container."""
    pids: int = 1024
    """Most processes in the container at once."""
    output_chars: int = 8000
    """Most characters of a command's output shown to the model (the middle is cut)."""
    verifier_mode: str = "auto"
    """``auto``: a separate verifier container where the task states it or declares artifacts
    (a shared one otherwise, or where the task opts out with ``environment_mode = "shared"``);
    ``separate`` or ``shared`` for every task. In a shared container an agent that replaces
    ``python3``, ``bash`` or the test runner can forge a pass; a separate verifier starts from
    the image and sees only the artifacts."""

    def __post_init__(self) -> None:
        if self.verifier_mode not in ("auto", "shared", "separate"):
            raise ConfigError(
                f"TrialSettings.verifier_mode must be 'auto', 'shared' or 'separate', got {self.verifier_mode!r}"
            )
        for name in ("command_timeout_s", "start_timeout_s"):
            _positive(f"TrialSettings.{name}", getattr(self, name))
        for name in ("agent_timeout_s", "verifier_timeout_s", "build_timeout_s"):
            _positive(f"TrialSettings.{name}", getattr(self, name))
        if self.pids < 8 or self.output_chars < 100:
            raise ConfigError("TrialSettings.pids must be >= 8 and output_chars >= 100")


@dataclass(frozen=True)
class HarborStep:
    """One loaded step of a multi-step task."""

    config: StepConfig
    """Its ``[[steps]]`` table."""
    path: Path
    """``steps/<name>/`` (absolute)."""
    instruction: str
    """``steps/<name>/instruction.md`` (canary lines removed)."""

    @property
    def name(self) -> str:
        """The step's name."""
        return self.config.name

    @property
    def tests_dir(self) -> Path:
        """``steps/<name>/tests/``: copied over the task's ``tests/`` for this step's verifier."""
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        """``steps/<name>/solution/``: this step's oracle."""
        return self.path / "solution"

    @property
    def workdir_dir(self) -> Path:
        """``steps/<name>/workdir/``: copied into the working directory when the step begins."""
        return self.path / "workdir"

    @property
    def setup_script(self) -> Path:
        """``steps/<name>/workdir/setup.sh``: run (from the working directory) before the step."""
        return self.workdir_dir / "setup.sh"


@dataclass(frozen=True)
class ComposeService:
    """One service of a multi-container task other than ``main`` (the agent's container)."""

    name: str
    """The service's name: its host name on the task's network."""
    spec: Mapping[str, Any]
    """Its ``docker-compose.yaml`` entry, validated (see :mod:`harbor_adapter.compose`)."""
    build_context: Path | None = None
    """The folder its image is built from (absolute), when it has ``build``."""
    dockerfile: str = "Dockerfile"
    """The Dockerfile's name in ``build_context``."""

    @property
    def healthcheck(self) -> bool:
        """True when the service declares a healthcheck (then "started" means "healthy")."""
        check = self.spec.get("healthcheck")
        return isinstance(check, Mapping) and not check.get("disable")


@dataclass(frozen=True)
class ComposeSpec:
    """``environment/docker-compose.yaml``: the services that run next to ``main``."""

    file: Path
    """The compose file."""
    services: tuple[ComposeService, ...]
    """The other services, in file order."""
    main_environment: Mapping[str, str] = field(default_factory=dict)
    """``services.main.environment``: added to the agent container's environment."""
    volumes: tuple[str, ...] = ()
    """Named volumes (top-level ``volumes``), made per trial and removed with it."""
    ignored: tuple[str, ...] = ()
    """Keys read and not acted on (``ports``: nothing is published on the host; ``networks``:
    every service is on the task's own network; ``main``'s other keys)."""


@dataclass(frozen=True)
class HarborTask:
    """One loaded, validated Harbor task directory."""

    path: Path
    """The task directory (absolute)."""
    name: str
    """``[task].name``, else the directory's name."""
    config: TaskConfig
    """The parsed ``task.toml``."""
    instruction: str
    """``instruction.md`` (leading canary comment lines removed, as Harbor does); a multi-step
    task's first step's instruction."""
    steps: tuple[HarborStep, ...] = ()
    """The steps of a multi-step task, in order; empty otherwise."""
    compose: ComposeSpec | None = None
    """The services of a multi-container task (``environment/docker-compose.yaml``); None for
    a single-container task."""

    @property
    def environment_dir(self) -> Path:
        """``environment/``: the image's build context."""
        return self.path / "environment"

    @property
    def dockerfile(self) -> Path | None:
        """``environment/Dockerfile`` if it exists."""
        p = self.environment_dir / "Dockerfile"
        return p if p.is_file() else None

    @property
    def compose_file(self) -> Path | None:
        """``environment/docker-compose.yaml`` (or ``.yml``) if it exists."""
        for name in ("docker-compose.yaml", "docker-compose.yml"):
            p = self.environment_dir / name
            if p.is_file():
                return p
        return None

    @property
    def tests_dir(self) -> Path:
        """``tests/``: copied into the container only after the agent is done."""
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        """``solution/``: the oracle; never in the container during a normal agent's phase."""
        return self.path / "solution"


@dataclass(frozen=True)
class VerifierResult:
    """What the verifier produced: the reward, or why there is none."""

    reward: float | None
    """The reward (``reward.txt``, or ``reward.json``'s ``reward`` key, or the mean of its
    values); ``None`` when ``error`` is set."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """Every named value of ``reward.json`` (``{"reward": r}`` for ``reward.txt``)."""
    error: str | None = None
    """Why there is no usable reward (missing, empty, non-numeric, NaN, infinite, timed out)."""
    exit_code: int | None = None
    """Exit status of ``tests/test.sh``."""
    timed_out: bool = False
    """``tests/test.sh`` ran past ``[verifier].timeout_sec``."""
    seconds: float = 0.0
    """Wall-clock seconds of the verifier phase."""
    output: str = ""
    """The end of the test script's output (for reports)."""

    @property
    def ok(self) -> bool:
        """True when there is a finite reward."""
        return self.error is None and self.reward is not None


@dataclass(frozen=True)
class TrialOutcome:
    """One trial as ``skyrl harbor check`` reports it."""

    task: str
    """Task name."""
    agent: str
    """``oracle`` or ``nop`` (or another agent's name)."""
    reward: float | None
    """The reward, ``None`` when the trial ended in an error."""
    error: str | None = None
    """Why there is no reward (``RewardError: ...``, ``ImageBuildError: ...``)."""
    seconds: float = 0.0
    """Wall-clock seconds of the whole trial (build, start, agent, verifier)."""
    metrics: Mapping[str, Any] = field(default_factory=dict)
    """The env's metrics of the episode."""

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON)."""
        return {
            "task": self.task,
            "agent": self.agent,
            "reward": self.reward,
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "metrics": dict(self.metrics),
        }
