"""Load and validate Harbor task directories.

::

    task = load_task("harbor_adapter/tasks/fix-median")   # HarborTask, or a clear error
    tasks = load_tasks("harbor_adapter/tasks")            # every task below a folder, by name

Validation is strict where a mistake would silently change a trial (an unknown key such as
``timeout_secs`` raises with a "did you mean"), and lenient where Harbor itself is (keys it
knows but this adapter does not act on are kept in ``TaskConfig.ignored``).
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from collections.abc import Mapping
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from harbor_adapter.compose import parse_compose
from harbor_adapter.errors import (
    HarborTaskError,
    TaskConfigError,
    TaskFileMissingError,
    UnsupportedTaskError,
)
from harbor_adapter.types import (
    AgentSection,
    ArtifactSpec,
    CollectHook,
    EnvironmentSection,
    HarborStep,
    HarborTask,
    Healthcheck,
    NetworkMode,
    RewardStrategy,
    SolutionSection,
    StepConfig,
    TaskConfig,
    VerifierMode,
    VerifierSection,
)
from skyrl_gym.errors import ConfigError, did_you_mean

__all__ = ["load_task", "load_tasks", "find_task_dirs", "parse_task_config", "bundled_tasks_dir"]

_E = TypeVar("_E", bound=Enum)

# Keys Harbor's TaskConfig (schema 1.x) knows, per table. Those not in _USED are accepted and
# listed in TaskConfig.ignored.
_KNOWN: dict[str, set[str]] = {
    "": {
        "schema_version",
        "version",
        "task",
        "metadata",
        "verifier",
        "agent",
        "environment",
        "solution",
        "source",
        "multi_step_reward_strategy",
        "steps",
        "artifacts",
    },
    "task": {"name", "version", "description", "authors", "keywords"},
    "agent": {"timeout_sec", "user", "network_mode", "allowed_hosts"},
    "verifier": {
        "timeout_sec",
        "env",
        "user",
        "network_mode",
        "allowed_hosts",
        "environment_mode",
        "environment",
        "collect",
    },
    "environment": {
        "build_timeout_sec",
        "docker_image",
        "os",
        "cpus",
        "memory_mb",
        "storage_mb",
        "memory",
        "storage",
        "gpus",
        "gpu_types",
        "tpu",
        "mcp_servers",
        "env",
        "skills_dir",
        "healthcheck",
        "workdir",
        "allow_internet",
        "network_mode",
        "allowed_hosts",
    },
    "solution": {"env"},
}
_USED: dict[str, set[str]] = {
    "agent": {"timeout_sec", "user"},
    "verifier": {"timeout_sec", "env", "user", "environment_mode", "environment", "collect"},
    "environment": {
        "build_timeout_sec",
        "docker_image",
        "os",
        "cpus",
        "memory_mb",
        "storage_mb",
        "memory",
        "storage",
        "gpus",
        "env",
        "healthcheck",
        "workdir",
        "allow_internet",
        "network_mode",
        "allowed_hosts",
    },
    "solution": {"env"},
}
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


def bundled_tasks_dir() -> Path:
    """The folder of the tasks shipped with this package."""
    return Path(__file__).resolve().parent / "tasks"


def _check_keys(table: Mapping[str, Any], section: str, where: Path) -> None:
    known = _KNOWN[section]
    for key in table:
        if key not in known:
            label = f"[{section}]" if section else "the top level"
            raise TaskConfigError(
                f"{where}: unknown key {key!r} in {label}; known: {sorted(known)}." + did_you_mean(key, known)
            )


def _known_keys(table: Mapping[str, Any], known: set[str] | frozenset[str], at: str) -> None:
    """Raise :class:`TaskConfigError` naming the keys of ``table`` not in ``known`` (``at``: where
    the table is), with the known ones and a "did you mean" for the first."""
    unknown = sorted(str(k) for k in set(table) - set(known))
    if unknown:
        raise TaskConfigError(
            f"{at} has unknown key(s) {unknown}; known: {sorted(known)}." + did_you_mean(unknown[0], known)
        )


def _table(data: Mapping[str, Any], name: str, where: Path) -> dict[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, Mapping):
        raise TaskConfigError(f"{where}: [{name}] must be a table, got {type(value).__name__}")
    _check_keys(value, name, where)
    return dict(value)


def _size_mb(value: Any, key: str, where: Path) -> int:
    """Harbor's legacy ``memory = "2G"`` / ``storage = "512M"``."""
    text = str(value).strip().upper()
    units = {"G": 1024, "M": 1, "K": 1 / 1024}
    try:
        return int(float(text[:-1]) * units[text[-1]])
    except (KeyError, ValueError, IndexError):
        raise TaskConfigError(
            f"{where}: [environment].{key}={value!r}: use a size like '2G' or '512M'"
        ) from None


def _string_map(value: Any, key: str, where: Path) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(v, (str, int, float, bool)) for v in value.values()
    ):
        raise TaskConfigError(f"{where}: {key} must be a table of strings, got {value!r}")
    return {str(k): str(v) for k, v in value.items()}


def _number(value: Any, key: str, where: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TaskConfigError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def parse_task_config(data: Mapping[str, Any], where: Path = Path("task.toml")) -> TaskConfig:
    """Validate a ``task.toml`` mapping and build a :class:`TaskConfig`.

    Raises :class:`TaskConfigError` for unknown keys (with a "did you mean") and values of the
    wrong type, :class:`UnsupportedTaskError` for what this adapter cannot run."""
    _check_keys(data, "", where)
    ignored = [k for k in ("source",) if k in data]
    task_table = _table(data, "task", where)
    tables = {name: _table(data, name, where) for name in ("agent", "verifier", "environment", "solution")}
    for name, table in tables.items():
        ignored += [f"{name}.{k}" for k in table if k not in _USED[name]]

    agent = tables["agent"]
    verifier = tables["verifier"]
    env = tables["environment"]
    solution = tables["solution"]
    try:
        agent_section = AgentSection(
            timeout_sec=_number(agent["timeout_sec"], "[agent].timeout_sec", where)
            if agent.get("timeout_sec") is not None
            else None,
            user=agent.get("user"),
        )
        verifier_section = VerifierSection(
            timeout_sec=_number(verifier.get("timeout_sec", 600.0), "[verifier].timeout_sec", where),
            env=_string_map(verifier.get("env", {}), "[verifier].env", where),
            user=verifier.get("user"),
            collect=_collect(verifier.get("collect", []), where),
            **_verifier_environment(verifier, where),
        )
        env_kwargs: dict[str, Any] = {}
        if "memory" in env:
            env_kwargs["memory_mb"] = _size_mb(env["memory"], "memory", where)
        if "storage" in env:
            env_kwargs["storage_mb"] = _size_mb(env["storage"], "storage", where)
        for key in ("memory_mb", "storage_mb", "gpus"):
            if env.get(key) is not None:
                value = env[key]
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TaskConfigError(f"{where}: [environment].{key} must be an integer, got {value!r}")
                if key in env_kwargs and env_kwargs[key] != value:
                    raise TaskConfigError(f"{where}: [environment].{key} conflicts with the older size key")
                env_kwargs[key] = value
        for key in ("cpus", "build_timeout_sec"):
            if env.get(key) is not None:
                env_kwargs[key] = _number(env[key], f"[environment].{key}", where)
        for key in ("docker_image", "workdir", "os"):
            if env.get(key) is not None:
                if not isinstance(env[key], str):
                    raise TaskConfigError(f"{where}: [environment].{key} must be a string, got {env[key]!r}")
                env_kwargs[key] = env[key]
        allow = env.get("allow_internet")
        if allow is not None and not isinstance(allow, bool):
            raise TaskConfigError(
                f"{where}: [environment].allow_internet must be true or false, got {allow!r}"
            )
        mode = env.get("network_mode")
        if mode is not None:
            env_kwargs["network_mode"] = _choice(NetworkMode, mode, "[environment].network_mode", where)
        elif allow is not None:
            env_kwargs["network_mode"] = NetworkMode.PUBLIC if allow else NetworkMode.NO_NETWORK
        hosts = env.get("allowed_hosts") or []
        if hosts and env_kwargs.get("network_mode") is not NetworkMode.ALLOWLIST:
            raise TaskConfigError(f"{where}: allowed_hosts is only valid with network_mode = 'allowlist'")
        if env.get("healthcheck") is not None:
            env_kwargs["healthcheck"] = _healthcheck(env["healthcheck"], "[environment.healthcheck]", where)
        env_section = EnvironmentSection(
            **env_kwargs,
            allowed_hosts=tuple(str(h) for h in hosts),
            allow_internet=allow,
            env=_string_map(env.get("env", {}), "[environment].env", where),
        )
        solution_section = SolutionSection(env=_string_map(solution.get("env", {}), "[solution].env", where))
    except HarborTaskError:
        raise
    except ConfigError as exc:  # a value out of range, from the dataclasses
        raise TaskConfigError(f"{where}: {exc}") from None
    if env_section.gpus:
        raise UnsupportedTaskError(
            f"{where}: the task asks for {env_section.gpus} GPU(s); only 0 is supported"
        )
    if env_section.os.lower() != "linux":
        raise UnsupportedTaskError(f"{where}: [environment].os={env_section.os!r}; only 'linux' is supported")
    metadata = data.get("metadata", {})
    if not isinstance(metadata, Mapping):
        raise TaskConfigError(f"{where}: [metadata] must be a table")
    version = data.get("schema_version", data.get("version", "1.0"))
    steps = _steps(data.get("steps") or [], agent_section, verifier_section, where)
    strategy = data.get("multi_step_reward_strategy")
    if strategy is not None and not steps:
        raise TaskConfigError(f"{where}: multi_step_reward_strategy is only for tasks with [[steps]]")
    return TaskConfig(
        steps=steps,
        reward_strategy=RewardStrategy.MEAN
        if strategy is None
        else _choice(RewardStrategy, strategy, "multi_step_reward_strategy", where),
        artifacts=_artifacts(data.get("artifacts", []), where),
        agent=agent_section,
        verifier=verifier_section,
        environment=env_section,
        solution=solution_section,
        schema_version=str(version),
        metadata=dict(metadata),
        name=task_table.get("name"),
        ignored=tuple(ignored),
    )


def _choice(enum_cls: type[_E], value: Any, key: str, where: Path) -> _E:
    """``enum_cls(value)``, or a :class:`TaskConfigError` naming the key, the choices and the
    closest one."""
    try:
        return enum_cls(value)
    except ValueError:
        choices = [m.value for m in enum_cls]
        raise TaskConfigError(
            f"{where}: {key}={value!r}; use one of {choices}." + did_you_mean(str(value), choices)
        ) from None


def _verifier_environment(verifier: Mapping[str, Any], where: Path) -> dict[str, Any]:
    """``environment_mode`` and ``[verifier.environment]`` of ``[verifier]``, as Harbor resolves
    them: a verifier environment without a mode means ``separate``; with ``shared`` it conflicts."""
    out: dict[str, Any] = {}
    mode = verifier.get("environment_mode")
    if mode is not None:
        out["environment_mode"] = _choice(VerifierMode, mode, "[verifier].environment_mode", where)
    environment = verifier.get("environment")
    if environment is None:
        return out
    if not isinstance(environment, Mapping):
        raise TaskConfigError(f"{where}: [verifier.environment] must be a table")
    if out.get("environment_mode") is VerifierMode.SHARED:
        raise TaskConfigError(
            f"{where}: [verifier.environment] conflicts with environment_mode = 'shared'; drop one of them"
        )
    out["environment_mode"] = VerifierMode.SEPARATE
    _known_keys(environment, _KNOWN["environment"], f"{where}: [verifier.environment]")
    image = environment.get("docker_image")
    if image is not None and not isinstance(image, str):
        raise TaskConfigError(f"{where}: [verifier.environment].docker_image must be a string, got {image!r}")
    out["docker_image"] = image
    return out


def _artifacts(value: Any, where: Path) -> tuple[ArtifactSpec, ...]:
    """``artifacts``: paths (strings) or tables with ``source`` (and ``exclude``, ``destination``)."""
    if not isinstance(value, list):
        raise TaskConfigError(f"{where}: artifacts must be a list of paths or tables, got {value!r}")
    out = []
    for i, entry in enumerate(value):
        if isinstance(entry, str):
            entry = {"source": entry}
        if not isinstance(entry, Mapping) or not isinstance(entry.get("source"), str):
            raise TaskConfigError(f"{where}: artifacts[{i}] must be a path or a table with a 'source' path")
        _known_keys(entry, {"source", "destination", "exclude", "service"}, f"{where}: artifacts[{i}]")
        source = entry["source"]
        if not source.startswith("/") or ".." in PurePosixPath(source).parts:
            raise TaskConfigError(
                f"{where}: artifacts[{i}].source must be an absolute path without '..', got {source!r}"
            )
        service = entry.get("service") or "main"
        if not isinstance(service, str):
            raise TaskConfigError(f"{where}: artifacts[{i}].service must be a service name, got {service!r}")
        exclude = entry.get("exclude", [])
        if not isinstance(exclude, list) or not all(isinstance(p, str) for p in exclude):
            raise TaskConfigError(f"{where}: artifacts[{i}].exclude must be a list of glob patterns")
        out.append(ArtifactSpec(source.rstrip("/") or "/", tuple(exclude), service))
    return tuple(out)


def _collect(value: Any, where: Path) -> tuple[CollectHook, ...]:
    """``[[verifier.collect]]``: tables with ``command`` (and ``service``, ``timeout_sec``, ``user``)."""
    if not isinstance(value, list):
        raise TaskConfigError(f"{where}: [[verifier.collect]] must be a list of tables, got {value!r}")
    out = []
    for i, entry in enumerate(value):
        at = f"{where}: verifier.collect[{i}]"
        if (
            not isinstance(entry, Mapping)
            or not isinstance(entry.get("command"), str)
            or not entry["command"]
        ):
            raise TaskConfigError(f"{at} must be a table with a command")
        _known_keys(entry, {"command", "service", "timeout_sec", "user"}, at)
        service = entry.get("service", "main")
        if not isinstance(service, str) or not service:
            raise TaskConfigError(f"{at}.service must be a service name, got {service!r}")
        timeout = _number(entry.get("timeout_sec", 60.0), f"verifier.collect[{i}].timeout_sec", where)
        out.append(CollectHook(entry["command"], service, timeout, entry.get("user")))
    return tuple(out)


def _check_services(task: HarborTask) -> None:
    """Every artifact and collect hook that names a service names one of the task's."""
    services = {s.name for s in task.compose.services} if task.compose is not None else set()
    named = [(f"artifact {a.source}", a.service) for a in task.config.artifacts]
    named += [
        (f"artifact {a.source} of step {s.name!r}", a.service) for s in task.steps for a in s.config.artifacts
    ]
    named += [(f"collect hook {h.command!r}", h.service) for h in task.config.verifier.collect]
    for what, service in named:
        if service != "main" and service not in services:
            have = sorted(services) or "none (no environment/docker-compose.yaml)"
            raise TaskConfigError(
                f"{task.path}: {what} names service {service!r}; the task's services: {have}"
            )


_STEP_KEYS = {"name", "agent", "verifier", "min_reward", "healthcheck", "artifacts"}
#: A step's folder name: portable on every file system, no path parts.
_STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _min_reward(value: Any, at: str, where: Path) -> float | dict[str, float] | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not value:
            raise TaskConfigError(f"{at}: min_reward table is empty")
        return {str(k): _number(v, f"{at}.min_reward.{k}", where) for k, v in value.items()}
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TaskConfigError(f"{at}: min_reward must be a number or a table of numbers, got {value!r}")
    return float(value)


def _steps(value: Any, agent: AgentSection, verifier: VerifierSection, where: Path) -> tuple[StepConfig, ...]:
    """``[[steps]]``: each step's section over the task's (a key the step leaves out keeps the
    task's value). A step-level ``user`` other than the task's is refused: one container runs
    every step, and its user is set when it starts."""
    if not isinstance(value, list):
        raise TaskConfigError(f"{where}: steps must be an array of tables ([[steps]])")
    out: list[StepConfig] = []
    seen: set[str] = set()
    for i, raw in enumerate(value):
        at = f"{where}: steps[{i}]"
        if not isinstance(raw, Mapping):
            raise TaskConfigError(f"{at} must be a table")
        _known_keys(raw, _STEP_KEYS, at)
        name = raw.get("name")
        if not isinstance(name, str) or not _STEP_NAME.match(name):
            raise TaskConfigError(
                f"{at}.name must be a folder name under steps/ (letters, digits, '.', '_', '-'), got {name!r}"
            )
        if name.casefold() in seen:
            raise TaskConfigError(f"{at}: step names must be unique (ignoring case); {name!r} repeats")
        seen.add(name.casefold())
        step_agent = _table(raw, "agent", where)
        step_verifier = _table(raw, "verifier", where)
        for section, table, base in (
            ("agent", step_agent, agent.user),
            ("verifier", step_verifier, verifier.user),
        ):
            if table.get("user") is not None and table["user"] != base:
                raise UnsupportedTaskError(
                    f"{at}: [steps.{section}].user={table['user']!r} differs from the task's; every step runs "
                    f"in one container as one user here. Set [{section}].user for the whole task instead"
                )
        try:
            step_agent_section = AgentSection(
                timeout_sec=_number(step_agent["timeout_sec"], f"steps[{i}].agent.timeout_sec", where)
                if step_agent.get("timeout_sec") is not None
                else agent.timeout_sec,
                user=agent.user,
            )
            step_verifier_section = None
            if step_verifier:
                mode = _verifier_environment(step_verifier, where)
                step_verifier_section = VerifierSection(
                    timeout_sec=_number(
                        step_verifier["timeout_sec"], f"steps[{i}].verifier.timeout_sec", where
                    )
                    if step_verifier.get("timeout_sec") is not None
                    else verifier.timeout_sec,
                    env={
                        **verifier.env,
                        **_string_map(step_verifier.get("env", {}), f"steps[{i}].verifier.env", where),
                    },
                    user=verifier.user,
                    environment_mode=mode.get("environment_mode"),
                    docker_image=mode.get("docker_image") or verifier.docker_image,
                )
        except ConfigError as exc:
            if isinstance(exc, HarborTaskError):
                raise
            raise TaskConfigError(f"{at}: {exc}") from None
        out.append(
            StepConfig(
                name=name,
                agent=step_agent_section,
                verifier=step_verifier_section,
                min_reward=_min_reward(raw.get("min_reward"), at, where),
                artifacts=_artifacts(raw.get("artifacts", []), where),
                healthcheck=_healthcheck(raw["healthcheck"], f"steps[{i}].healthcheck", where)
                if raw.get("healthcheck") is not None
                else None,
            )
        )
    return tuple(out)


_HEALTH_KEYS = {"command", "interval_sec", "timeout_sec", "start_period_sec", "start_interval_sec", "retries"}


def _healthcheck(value: Any, at: str, where: Path) -> Healthcheck:
    """A healthcheck table: ``command`` and Docker HEALTHCHECK's timing keys."""
    if not isinstance(value, Mapping) or not isinstance(value.get("command"), str) or not value["command"]:
        raise TaskConfigError(f"{where}: {at} must be a table with a command")
    _known_keys(value, _HEALTH_KEYS, f"{where}: {at}")
    timing = {}
    for key in ("interval_sec", "timeout_sec", "start_period_sec", "start_interval_sec"):
        if key in value:
            timing[key] = _number(value[key], f"{at}.{key}", where)
            if timing[key] < 0 or (key == "timeout_sec" and timing[key] == 0):
                raise TaskConfigError(f"{where}: {at}.{key} must be positive, got {value[key]!r}")
    retries = value.get("retries", 3)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise TaskConfigError(f"{where}: {at}.retries must be a whole number >= 0, got {retries!r}")
    return Healthcheck(value["command"], retries=retries, **timing)


def _load_steps(root: Path, config: TaskConfig) -> tuple[HarborStep, ...]:
    """Each step's folder, instruction and verifier, checked."""
    steps = []
    for cfg in config.steps:
        path = root / "steps" / cfg.name
        instruction_path = path / "instruction.md"
        if not instruction_path.is_file():
            raise TaskFileMissingError(f"{root}: step {cfg.name!r} has no steps/{cfg.name}/instruction.md")
        instruction = _strip_canary(instruction_path.read_text(encoding="utf-8")).strip()
        if not instruction:
            raise HarborTaskError(f"{instruction_path} is empty; write the step for the agent there")
        step = HarborStep(cfg, path, instruction)
        if not (step.tests_dir / "test.sh").is_file() and not (root / "tests" / "test.sh").is_file():
            raise TaskFileMissingError(
                f"{root}: step {cfg.name!r} has no verifier: neither steps/{cfg.name}/tests/test.sh nor tests/test.sh"
            )
        if step.setup_script.exists() and not step.setup_script.is_file():
            raise TaskConfigError(f"{step.setup_script} must be a file")
        steps.append(step)
    extra = (
        sorted(
            p.name
            for p in (root / "steps").iterdir()
            if p.is_dir() and p.name not in {c.name for c in config.steps}
        )
        if (root / "steps").is_dir()
        else []
    )
    if extra:
        raise TaskConfigError(f"{root}: steps/ has folders no [[steps]] table names: {extra}")
    return tuple(steps)


def _strip_canary(text: str) -> str:
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _CANARY.match(lines[i].strip()):
        i += 1
    return "\n".join(lines[i:])


def load_task(path: str | Path) -> HarborTask:
    """Load and validate one task directory.

    Raises :class:`TaskFileMissingError` for a missing ``task.toml``, ``instruction.md``,
    ``tests/test.sh`` or image (neither ``environment/Dockerfile`` nor ``docker_image``),
    :class:`TaskConfigError` for bad TOML or keys, :class:`UnsupportedTaskError` for what
    cannot run here."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise TaskFileMissingError(f"{root} is not a directory; point at a Harbor task folder")
    toml_path = root / "task.toml"
    if not toml_path.is_file():
        raise TaskFileMissingError(f"{root}: no task.toml; every Harbor task needs one (even an empty file)")
    try:
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskConfigError(f"{toml_path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise TaskConfigError(f"{toml_path}: not UTF-8 text") from None
    config = parse_task_config(data, toml_path)
    steps = _load_steps(root, config)
    if steps:  # a multi-step task: the root instruction.md, if any, is never sent (as in Harbor)
        instruction = steps[0].instruction
    else:
        instruction_path = root / "instruction.md"
        if not instruction_path.is_file():
            raise TaskFileMissingError(f"{root}: no instruction.md (what the agent is asked to do)")
        instruction = _strip_canary(instruction_path.read_text(encoding="utf-8")).strip()
        if not instruction:
            raise HarborTaskError(f"{instruction_path} is empty; write the task for the agent there")
        if not (root / "tests" / "test.sh").is_file():
            raise TaskFileMissingError(
                f"{root}: no tests/test.sh (the verifier; it writes /logs/verifier/reward.txt or reward.json)"
            )
    task = HarborTask(root, config.name or root.name, config, instruction, steps)
    if task.compose_file is not None:  # a multi-container task: main plus the file's services
        compose = parse_compose(task.compose_file, task.environment_dir)
        ignored = (*config.ignored, *(f"docker-compose.yaml: {key}" for key in compose.ignored))
        task = dataclasses.replace(task, compose=compose, config=dataclasses.replace(config, ignored=ignored))
    _check_services(task)
    if task.dockerfile is None and config.environment.docker_image is None:
        if task.compose_file is not None:
            raise TaskFileMissingError(
                f"{root}: environment/docker-compose.yaml but no environment/Dockerfile: the agent's "
                "service (main) is built from it, as in Harbor; add it"
            )
        raise TaskFileMissingError(
            f"{root}: no environment/Dockerfile and no [environment].docker_image; the task needs an image"
        )
    return task


def find_task_dirs(root: str | Path) -> list[Path]:
    """Task directories at or below ``root`` (a folder with ``task.toml``), sorted by path.

    ``root`` itself may be a task."""
    base = Path(root)
    if not base.is_dir():
        raise TaskFileMissingError(f"{base} is not a directory of Harbor tasks")
    if (base / "task.toml").is_file():
        return [base.resolve()]
    return sorted(p.parent.resolve() for p in base.rglob("task.toml"))


def load_tasks(root: str | Path) -> list[HarborTask]:
    """Every task at or below ``root``, loaded and validated (the first broken one raises).
    Raises :class:`TaskFileMissingError` when there is none."""
    dirs = find_task_dirs(root)
    if not dirs:
        raise TaskFileMissingError(f"{root}: no Harbor tasks (no task.toml at or below it)")
    tasks = [load_task(d) for d in dirs]
    names = [t.name for t in tasks]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise HarborTaskError(f"{root}: task names must be unique; repeated: {dupes}")
    return tasks
