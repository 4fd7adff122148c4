"""mini-swe-agent (PyPI ``mini-swe-agent``, 2.x) as an external harness on the ``swe`` env's tasks.

The harness runs as its users run it: its own agent loop (``DefaultAgent``), its own prompts
(a config of its package, ``swebench_backticks`` by default: one bash block per reply, submit
with ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``), its own model class over LiteLLM. What
this module changes is where its two ends lead:

- **The model** is ``skyrl serve`` (any OpenAI-compatible server of this project): LiteLLM's
  ``openai/<model>`` provider at ``base_url``, every call tagged with the episode's session id
  (the ``X-Session-ID`` header), so the server records each call with its token ids and
  sampler logprobs.
- **The commands** run in the task's sandbox (:class:`SandboxEnvironment`): the ``swe`` env's
  workspace, the repository at its base commit in Docker or a local directory, with the env's
  deadlines, output caps and process limits.

After the episode, the patch (what the agent submitted, else the working tree's diff) is graded
by the SWE grader (:func:`skyrl_gym.envs.swe.grading.grade_patch`: a fresh sandbox, protected
test files, the instance's log parser), and the session's calls come back from the server as
trajectories scored with that reward (:func:`fetch_trajectories`), ready for one training update
(:func:`trainers.episodes.train_on_episodes`)::

    with ServerThread(HFPolicy(model, tok), ServerConfig(model_name="m")) as server:
        cfg = MiniSweConfig(base_url=server.url, model="m")
        episodes = [run_episode(inst, cfg, env_config={"sandbox": "docker"}, group_id=0) for _ in range(4)]
    stats = train_on_episodes(model, optimizer, [e.trajectories for e in episodes], TrainConfig(), pad_id=...)

Needs the ``swe`` extra (``pip install -e '.[swe]'``).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from skyrl_agent.failures import Failure, FailureStage
from skyrl_agent.server.sessions import with_reward
from skyrl_agent.types import Trajectory
from skyrl_gym.envs.swe.env import SWEEnv
from skyrl_gym.envs.swe.grading import grade_patch
from skyrl_gym.envs.swe.types import GradeReport, SWEInstance
from skyrl_gym.errors import ConfigError, InfrastructureError, MissingDependencyError

__all__ = ["MiniSweConfig", "MiniSweEpisode", "SandboxEnvironment", "fetch_trajectories", "run_episode"]

#: The header that names the server session of a call (see ``skyrl_agent.server``).
SESSION_HEADER = "X-Session-ID"

# the package prints a banner and reads ~/.config/mini-swe-agent/.env at import unless told not
# to; LiteLLM downloads its price map at import unless told not to
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def _import() -> Any:
    try:
        from minisweagent.environments.local import LocalEnvironment
    except ImportError as exc:  # pragma: no cover - the extra is installed in CI
        raise MissingDependencyError("mini-swe-agent", "swe", "the mini-swe-agent harness") from exc
    return LocalEnvironment


@dataclass
class MiniSweConfig:
    """How mini-swe-agent reaches the model and how long it may work."""

    base_url: str
    """The OpenAI-compatible server's base URL, with ``/v1`` (``ServerThread.url``)."""
    model: str
    """The model name the server serves (``ServerConfig.model_name``)."""
    api_key: str = "none"
    """Sent as the bearer token (``skyrl serve`` ignores it)."""
    agent_config: str = "swebench_backticks"
    """A config of the mini-swe-agent package (``swebench_backticks``, ``swebench``, ``mini``...)
    or a path to a YAML file of the same shape; its ``agent`` and ``model`` sections are used."""
    model_class: str = "litellm_textbased"
    """mini-swe-agent's model class: ``litellm_textbased`` (actions in a fenced block, for the
    ``*_backticks``/``mini_textbased`` configs) or ``litellm`` (tool calls, for ``swebench``)."""
    step_limit: int = 20
    """Model calls per episode (the config's own limit is for frontier models: 250)."""
    max_consecutive_format_errors: int = 3
    """The agent stops after this many replies in a row without exactly one action."""
    temperature: float = 1.0
    """Sampling temperature of every call."""
    max_tokens: int = 512
    """Completion tokens per call."""
    command_timeout_s: int = 60
    """Deadline of each command in the sandbox."""
    request_timeout_s: float = 600.0
    """Deadline of each model call."""
    retries: int = 2
    """Attempts per model call (mini-swe-agent's default is 10 with waits up to a minute; a
    local server that fails once is unlikely to answer the eighth time). Process-wide: it sets
    ``MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT`` unless that is already set."""
    extra_model_kwargs: dict[str, Any] = field(default_factory=dict)
    """More arguments for ``litellm.completion`` (``top_p``, ``seed``, ...)."""

    def __post_init__(self) -> None:
        if self.step_limit < 1:
            raise ConfigError(f"step_limit must be >= 1, got {self.step_limit}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.command_timeout_s <= 0 or self.request_timeout_s <= 0:
            raise ConfigError("command_timeout_s and request_timeout_s must be > 0")
        if self.retries < 1:
            raise ConfigError(f"retries must be >= 1, got {self.retries}")


@dataclass
class MiniSweEpisode:
    """What one mini-swe-agent episode on one task gave."""

    instance_id: str
    session_id: str
    """The server session holding the episode's calls."""
    exit_status: str
    """mini-swe-agent's: ``Submitted``, ``LimitsExceeded``, ``RepeatedFormatError``, or an error's
    type name."""
    patch: str
    """What was graded: the submitted patch, else the working tree's diff."""
    patch_source: str
    """``submission`` or ``worktree``."""
    report: GradeReport | None
    """The grader's report; None when the episode failed before grading."""
    reward: float
    """1.0 when resolved, else 0.0."""
    masked: bool
    """The episode says nothing about the model (a sandbox failure, an instance whose listed
    tests never ran): train on none of its trajectories."""
    messages: list[dict[str, Any]]
    """The agent's message history, as mini-swe-agent keeps it (its trajectory format)."""
    trajectories: list[Trajectory] = field(default_factory=list)
    """The server's record of the calls, scored ``reward``, with ``group_id`` set."""
    error: str | None = None
    """Why the episode is masked."""


def _sandbox_environment_class() -> type:
    LocalEnvironment = _import()

    class _SandboxEnvironment(LocalEnvironment):  # type: ignore[misc, valid-type]
        """mini-swe-agent's Environment whose commands run in a ``swe`` workspace: each command
        in a fresh ``bash -c`` with stderr merged into stdout (as its local environment does),
        in the repository's root unless told another directory. The submit sentinel is
        recognised by the package's own check."""

        def __init__(self, workspace: Any, *, timeout: int, env: Mapping[str, str] | None = None) -> None:
            super().__init__(cwd=workspace.root, env=dict(env or {}), timeout=timeout)
            self.workspace = workspace
            self._uname: dict[str, str] | None = None

        def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
            command = action.get("command", "")
            ws = self.workspace
            limit = timeout or self.config.timeout
            result = ws.sandbox.exec(  # a SandboxError (infrastructure) propagates: the episode is masked
                ["bash", "-c", 'bash -c "$1" 2>&1', "mini-swe-agent", command],
                workdir=cwd or self.config.cwd,
                env={**ws.env, **self.config.env},
                timeout=limit,
            )
            output = {
                "output": result.stdout + result.stderr,
                "returncode": result.exit_code,
                "exception_info": f"the command timed out after {limit} s and was killed"
                if result.timed_out
                else "",
            }
            self._check_finished(output)
            return output

        def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
            # the sandbox's platform, not the host's (mini's configs show it to the model)
            if self._uname is None:
                r = self.workspace.sandbox.exec(
                    [
                        getattr(self.workspace, "python", "python3"),
                        "-c",
                        "import json, platform; print(json.dumps(platform.uname()._asdict()))",
                    ],
                    timeout=30,
                )
                self._uname = json.loads(r.stdout) if r.ok else {}
            return {**self.config.model_dump(), **self._uname, **kwargs}

    return _SandboxEnvironment


def SandboxEnvironment(workspace: Any, *, timeout: int, env: Mapping[str, str] | None = None) -> Any:
    """A mini-swe-agent ``Environment`` running its commands in ``workspace`` (a
    :class:`skyrl_gym.sandbox.terminal.Workspace`, e.g. ``SWEEnv.workspace``), each with
    deadline ``timeout`` seconds."""
    return _sandbox_environment_class()(workspace, timeout=timeout, env=env)


def _agent_and_model(config: MiniSweConfig, session_id: str) -> tuple[dict[str, Any], Any]:
    _import()
    import litellm
    from minisweagent.config import get_config_from_spec
    from minisweagent.models import get_model_class

    try:
        spec = get_config_from_spec(config.agent_config)
    except FileNotFoundError as exc:
        raise ConfigError(
            f"agent_config {config.agent_config!r}: {exc}; name a config of the mini-swe-agent package "
            "(swebench_backticks, swebench, mini, mini_textbased) or a YAML path"
        ) from None
    agent_kw = dict(spec.get("agent", {}))
    agent_kw.pop("mode", None)  # the interactive agent's setting
    agent_kw.update(
        step_limit=config.step_limit,
        cost_limit=0.0,  # a local model costs nothing; the step limit bounds the episode
        max_consecutive_format_errors=config.max_consecutive_format_errors,
    )
    model_kw = {k: v for k, v in spec.get("model", {}).items() if k not in ("model_name", "model_class")}
    model_kw["model_kwargs"] = {
        **model_kw.get("model_kwargs", {}),
        "api_base": config.base_url,
        "api_key": config.api_key,
        "temperature": config.temperature,
        "max_tokens": config.max_tokens,
        "timeout": config.request_timeout_s,
        "extra_headers": {SESSION_HEADER: session_id},
        **config.extra_model_kwargs,
    }
    model_kw["cost_tracking"] = "ignore_errors"  # an unregistered local model has no price
    litellm.suppress_debug_info = True  # else each unpriced call prints LiteLLM's provider list
    os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", str(config.retries))
    model = get_model_class(f"openai/{config.model}", config.model_class)(
        model_name=f"openai/{config.model}", **model_kw
    )
    return agent_kw, model


def fetch_trajectories(
    base_url: str, session_id: str, *, reward: float, group_id: int = 0, timeout_s: float = 60.0
) -> list[Trajectory]:
    """The server's trajectories of ``session_id``, scored ``reward`` with ``group_id`` set; the
    session is removed from the server (``DELETE /v1/sessions/{id}``). Empty for a session the
    server does not know (no call was made)."""
    r = httpx.delete(f"{base_url.rstrip('/')}/sessions/{session_id}", timeout=timeout_s)
    if r.status_code == 404:
        return []
    r.raise_for_status()
    out = []
    for d in r.json()["trajectories"]:
        traj = with_reward(Trajectory.from_dict(d), reward)
        traj.group_id = group_id
        out.append(traj)
    return out


def run_episode(
    instance: SWEInstance,
    config: MiniSweConfig,
    *,
    env_config: Mapping[str, Any] | None = None,
    group_id: int = 0,
    session_id: str | None = None,
) -> MiniSweEpisode:
    """Run mini-swe-agent on ``instance`` to its end (a submission, the step limit, repeated
    format errors), grade its patch, and collect its calls from the server as trajectories.

    ``env_config`` is the ``swe`` env's (:class:`~skyrl_gym.envs.swe.types.SWEEnvConfig` fields:
    ``sandbox``, limits, ``repos_dir``...). A sandbox failure or an instance whose listed tests
    never ran masks the episode (``masked``, ``error``) instead of scoring it 0; an error of
    the harness itself (a server that does not answer) propagates."""
    from minisweagent.agents.default import DefaultAgent

    sid = session_id or f"mini-swe-{instance.instance_id}-{uuid.uuid4().hex[:12]}"
    agent_kw, model = _agent_and_model(config, sid)
    env = SWEEnv(dict(env_config or {}), extras=instance.to_row())
    report: GradeReport | None = None
    error: str | None = None
    failure: Failure | None = None
    agent = None
    patch, source, exit_status = "", "worktree", ""
    try:
        workspace = env.workspace
        agent = DefaultAgent(
            model, SandboxEnvironment(workspace, timeout=config.command_timeout_s), **agent_kw
        )
        info = agent.run(instance.problem_statement)
        exit_status = str(info.get("exit_status", ""))
        submission = str(info.get("submission") or "")
        if exit_status == "Submitted" and "diff --git" in submission:
            patch, source = submission[submission.index("diff --git") :], "submission"
        else:
            try:
                patch = env.current_patch()
            except ValueError:  # the agent broke the repository's .git: graded as no change
                patch = ""
        env.close()
        report = grade_patch(instance, patch, config=env.config, source=env.source)
        if report.setup_error:
            error = f"listed tests never ran: {', '.join(report.missing[:5])}"
            failure = Failure(FailureStage.GRADE, "SetupError", error, retriable=False)
    except InfrastructureError as exc:  # sandbox or grading infrastructure: says nothing of the model
        failure = Failure.of(exc, FailureStage.ENV)
        error = str(failure)
        exit_status = exit_status or type(exc).__name__
    finally:
        env.close()
    masked = failure is not None
    reward = 0.0 if masked or report is None else float(report.reward)
    trajectories = fetch_trajectories(config.base_url, sid, reward=reward, group_id=group_id)
    for t in trajectories:
        t.masked = masked
        if failure is not None:
            t.set_failure(failure)
        t.env_id = "swe"
        t.env_metrics = {**t.env_metrics, "instance_id": instance.instance_id, "harness": "mini-swe-agent"}
    return MiniSweEpisode(
        instance_id=instance.instance_id,
        session_id=sid,
        exit_status=exit_status,
        patch=patch,
        patch_source=source,
        report=report,
        reward=reward,
        masked=masked,
        messages=list(agent.messages) if agent is not None else [],
        trajectories=trajectories,
        error=error,
    )
