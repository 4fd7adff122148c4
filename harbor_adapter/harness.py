"""Any Harbor agent harness, captured for training: ``harbor run`` against ``skyrl serve``.

An external harness (Harbor's ``terminus-2``, or any agent ``harbor run -a`` accepts that talks
to an OpenAI-compatible endpoint through LiteLLM) runs a task's trial in Harbor's own Python 3.12
environment. Its model is our server: each trial gets its own base URL,
``server.session_url(trial)``, so every call of that trial lands in one captured session (token
ids, logprobs, branches where the harness summarised or resampled, client retries merged).
Harbor's verifier scores the trial; the session's root-to-leaf paths (chosen by
:attr:`HarnessConfig.paths`) become trainable :class:`~skyrl_agent.types.Trajectory` objects
carrying that reward::

    with ServerThread(policy, ServerConfig(model_name="policy", max_model_len=8192)) as server:
        trials = capture_trials("harbor_adapter/tasks/hello-file", server, n=4)
    episodes = [t.trajectories for t in trials if not t.masked]    # -> train_on_episodes

The container runs under :mod:`skyrl_docker_env` (``harbor_plugin/``), a Harbor environment over
the plain ``docker`` CLI, since Harbor's own ``docker`` environment needs Docker Compose v2 and a
pulled sidecar image. The task's image is built here, offline, by our builder. Nothing here
reaches beyond 127.0.0.1: Harbor's telemetry is switched off and LiteLLM reads its bundled model
table.

Failure is never a score: a trial whose ``harbor run`` fails, times out or reports no verifier
result is ``masked`` (with the reason), as a trial error is in :mod:`harbor_adapter.trial`.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harbor_adapter.errors import HarborTaskError
from harbor_adapter.harbor_env import find_harbor_python, harbor_subprocess_env, plugin_dir
from harbor_adapter.images import ensure_image
from harbor_adapter.loader import load_task
from harbor_adapter.types import HarborTask
from skyrl_agent.server.sessions import PathRule, with_reward
from skyrl_agent.types import Trajectory
from skyrl_gym.errors import ConfigError

__all__ = [
    "HarnessConfig",
    "CapturedTrial",
    "capture_trials",
    "harbor_job_config",
    "harbor_subprocess_env",
    "plugin_dir",
    "ENVIRONMENT_IMPORT_PATH",
    "LABEL_RUN",
]

#: Harbor's ``--env`` for the plugin environment (with :func:`plugin_dir` on ``PYTHONPATH``).
ENVIRONMENT_IMPORT_PATH = "skyrl_docker_env:SkyRLDockerEnvironment"
#: Label on every container of one :func:`capture_trials` call (removed when the call ends).
LABEL_RUN = "skyrl.harbor.run"


@dataclass(frozen=True)
class HarnessConfig:
    """How :func:`capture_trials` runs the harness."""

    agent: str = "terminus-2"
    """Harbor agent (``harbor run -a``): a name Harbor knows, or ``module.path:ClassName``."""
    agent_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the agent (``--ak``), over the defaults for ``terminus-2``
    (``max_turns=4``, no asciinema recording, the server's context as ``model_info``)."""
    paths: PathRule = "all"
    """Which root-to-leaf paths of a trial's session train: ``"all"``, ``"final"`` or a function."""
    timeout_s: float = 900.0
    """Deadline of one trial's ``harbor run`` (Harbor applies the task's own timeouts inside it);
    past it the whole process group is killed, its containers removed and the trial masked."""
    ttl_s: float = 6 * 3600
    """Time-to-live label of the trial containers: ``skyrl sandbox reap`` removes them after it,
    or at once when this process is gone (after ``kill -9``)."""

    def __post_init__(self) -> None:
        if not self.agent or not isinstance(self.agent, str):
            raise ConfigError(
                "HarnessConfig.agent: name a Harbor agent, e.g. 'terminus-2' or 'pkg.mod:Agent'"
            )
        if not self.timeout_s > 0 or not self.ttl_s > 0:
            raise ConfigError("HarnessConfig.timeout_s and ttl_s must be positive (seconds)")
        if not (callable(self.paths) or self.paths in ("all", "final")):
            raise ConfigError(f"HarnessConfig.paths: 'all', 'final' or a function, not {self.paths!r}")


@dataclass
class CapturedTrial:
    """One trial of the harness: Harbor's verdict and the captured, scored trajectories."""

    name: str
    """Trial (and session) name."""
    reward: float | None
    """The verifier's ``reward`` (None when masked)."""
    trajectories: list[Trajectory]
    """The session's chosen paths, each scored ``reward`` at its last generated token (empty
    when masked, or when the harness never called the model)."""
    masked: bool
    """True when the trial must not train: Harbor failed, timed out, or gave no verifier result."""
    error: str | None
    """Why it was masked (or the exception Harbor recorded while still scoring it)."""
    trial_dir: Path | None
    """Harbor's trial folder (``result.json``, agent and verifier logs), when it wrote one."""
    rewards: dict[str, float] = field(default_factory=dict)
    """Every key of the verifier's reward file."""
    calls: int = 0
    """Model calls the session recorded."""


def _agent_kwargs(cfg: HarnessConfig, api_base: str, max_model_len: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"api_base": api_base}
    if cfg.agent == "terminus-2":
        kwargs |= {
            "max_turns": 4,
            "record_terminal_session": False,
            "proactive_summarization_threshold": 0,
            "model_info": {
                "max_input_tokens": max_model_len,
                "max_output_tokens": max_model_len,
                "input_cost_per_token": 0.0,
                "output_cost_per_token": 0.0,
            },
        }
    return kwargs | dict(cfg.agent_kwargs)


def harbor_job_config(
    task: HarborTask,
    *,
    job_name: str,
    jobs_dir: Path,
    model_name: str,
    api_base: str,
    image: str,
    labels: dict[str, str],
    cfg: HarnessConfig,
    max_model_len: int = 4096,
) -> dict[str, Any]:
    """The ``harbor run -c`` job of one trial: the task, the agent on ``api_base``, the plugin
    environment on the prebuilt ``image`` with ``labels``."""
    agent: dict[str, Any] = {"model_name": model_name, "kwargs": _agent_kwargs(cfg, api_base, max_model_len)}
    agent["import_path" if ":" in cfg.agent else "name"] = cfg.agent
    return {
        "job_name": job_name,
        "jobs_dir": str(jobs_dir),
        "n_attempts": 1,
        "n_concurrent_trials": 1,
        "quiet": True,
        "environment": {"import_path": ENVIRONMENT_IMPORT_PATH, "kwargs": {"image": image, "labels": labels}},
        "agents": [agent],
        "tasks": [{"path": str(task.path)}],
    }


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _remove_run_containers(run_id: str) -> None:
    with contextlib.suppress(Exception):
        from skyrl_gym.sandbox.dockerlib import docker_client

        for c in docker_client().containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"}):
            with contextlib.suppress(Exception):
                c.remove(force=True, v=True)


def _read_result(job_dir: Path) -> tuple[Path | None, dict[str, Any] | None]:
    for path in sorted(job_dir.glob("*/result.json")):
        with contextlib.suppress(OSError, ValueError):
            return path.parent, json.loads(path.read_text())
    return None, None


def _verdict(result: dict[str, Any] | None) -> tuple[dict[str, float] | None, str | None]:
    """(rewards or None, error): rewards only from a verifier result with a numeric ``reward``."""
    if result is None:
        return None, "Harbor wrote no trial result.json"
    exc = result.get("exception_info") or None
    error = (
        f"{exc.get('exception_type', 'error')}: {exc.get('exception_message', '')}".strip() if exc else None
    )
    rewards = (result.get("verifier_result") or {}).get("rewards") or {}
    if not isinstance(rewards, dict) or not isinstance(rewards.get("reward"), int | float):
        return None, error or "the verifier gave no `reward`"
    return {k: float(v) for k, v in rewards.items() if isinstance(v, int | float)}, error


def capture_trials(
    task_dir: str | Path,
    server: Any,
    *,
    n: int = 1,
    names: Sequence[str] | None = None,
    jobs_dir: str | Path | None = None,
    cfg: HarnessConfig | None = None,
    group_id: int = 0,
) -> list[CapturedTrial]:
    """Run ``n`` trials of the task at ``task_dir`` (or one per name in ``names``), one after
    another, each with ``harbor run`` and the harness of ``cfg`` against ``server`` (a running
    :class:`~skyrl_agent.server.ServerThread`); return each trial's verdict and captured paths,
    every path carrying ``group_id`` (the trials of one task are one GRPO group). Harbor's files
    go to ``jobs_dir/<trial>/`` (default ``~/.cache/skyrl/harbor-jobs``).

    Raises :class:`HarborTaskError` when Harbor's Python 3.12 environment is missing (make it:
    ``python -m harbor_adapter.harbor_env``) or the task does not load; everything that goes
    wrong inside a trial masks that trial instead."""
    cfg = cfg or HarnessConfig()
    task = load_task(task_dir)
    if task.compose is not None or task.steps:
        raise HarborTaskError(
            f"{task.name}: the captured-harness runner takes single-container, single-step tasks "
            "(run multi-container or multi-step tasks through the `harbor` env instead)"
        )
    harbor_python = find_harbor_python()
    if harbor_python is None:
        raise HarborTaskError("no Harbor environment: make it with `python -m harbor_adapter.harbor_env`")
    harbor = harbor_python.parent / "harbor"
    image, _, _ = ensure_image(task)
    run_id = uuid.uuid4().hex[:12]
    trial_names = list(names) if names is not None else [f"{task.name}-{run_id}-{i}" for i in range(n)]
    root = Path(jobs_dir) if jobs_dir is not None else Path.home() / ".cache" / "skyrl" / "harbor-jobs"
    from skyrl_gym.sandbox.reaper import owner_labels

    out: list[CapturedTrial] = []
    try:
        for name in trial_names:
            out.append(
                _one_trial(task, server, name, root, image, run_id, harbor, cfg, owner_labels, group_id)
            )
    finally:
        _remove_run_containers(run_id)
    return out


def _one_trial(
    task: HarborTask,
    server: Any,
    name: str,
    root: Path,
    image: str,
    run_id: str,
    harbor: Path,
    cfg: HarnessConfig,
    owner_labels: Any,
    group_id: int,
) -> CapturedTrial:
    job_dir = root / name
    job_dir.mkdir(parents=True, exist_ok=True)
    labels = owner_labels(cfg.ttl_s) | {LABEL_RUN: run_id}
    job = harbor_job_config(
        task,
        job_name=name,
        jobs_dir=root,
        model_name=f"hosted_vllm/{server.config.model_name}",
        api_base=server.session_url(name),
        image=image,
        labels=labels,
        cfg=cfg,
        max_model_len=server.config.max_model_len,
    )
    config_path = root / f"{name}.job.json"
    config_path.write_text(json.dumps(job, indent=2))
    log_path = root / f"{name}.log"
    error: str | None = None
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(harbor), "run", "-c", str(config_path), "-y"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=harbor_subprocess_env(),
            cwd=root,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        try:
            proc.wait(timeout=cfg.timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            error = f"harbor run passed its {cfg.timeout_s:.0f} s deadline (killed)"
    _remove_run_containers(run_id)
    trial_dir, result = _read_result(job_dir)
    rewards, why = _verdict(result)
    calls = len(server.store.get(name) or [])
    if error is None and rewards is None:
        tail = log_path.read_text(errors="replace")[-1500:] if proc.returncode else ""
        error = f"{why} (harbor run exit {proc.returncode}; log {log_path})" + (f"\n{tail}" if tail else "")
    if error is not None or rewards is None:
        return CapturedTrial(name, None, [], True, error or why, trial_dir, {}, calls)
    reward = rewards["reward"]
    trajs = [
        dataclasses.replace(with_reward(t, reward), group_id=group_id)
        for t in server.store.trajectories(name, paths=cfg.paths)
    ]
    return CapturedTrial(name, reward, trajs, False, why, trial_dir, rewards, calls)
