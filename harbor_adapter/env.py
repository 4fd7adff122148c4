"""``harbor``: a Harbor task as a multi-turn text env with a terminal (``TerminalEnv``).

The model works in the task's container through tools, called Hermes style::

    <tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>

- ``bash(command)``: run a command (a fresh ``bash -c`` in the task's working directory) with a
  per-command deadline; the observation is the exit code and the (middle-cut) output.
- ``read_file(path)`` / ``write_file(path, content)``: files in the container.
- ``submit()``: the agent is done; the verifier runs.

The tools are :class:`~skyrl_gym.sandbox.TerminalTools` (shared with the ``swe`` env); Harbor's
own part is how ``bash`` runs (through the trial: the agent budget) and how its result reads.
The episode ends on ``submit``, at ``max_turns``, or when the agent phase's budget
(``[agent].timeout_sec``) is spent; then the verifier runs once and its reward is the episode's
reward (on the last turn, 0 before). A verifier that leaves no usable reward
(:class:`~harbor_adapter.errors.TrialError`), or a container that fails (a
:class:`~skyrl_gym.errors.SandboxError`, raised from the tool through the tool executor),
raises out of ``step``: both are infrastructure errors, and the runtime records the episode as
masked, never as reward 0.

A multi-step task (``[[steps]]``) is one episode: the first step's instruction is the first
user message; when a step ends (``submit``, its ``max_turns`` turns, or its agent budget) its
verifier runs, and the next step's instruction arrives as the observation, in the same
container. The episode ends after the last step, or after a step whose reward misses its
``min_reward``. Each step's reward sits on that step's last turn so that the turn rewards add
up to the task's reward by its ``multi_step_reward_strategy``: with ``mean`` a step adds its
reward over the number of steps (and the last step run adds what makes the sum the mean over
the steps that ran); with ``final`` only the last step run carries a reward. ``max_turns``
counts over the whole episode: when the turns run out, the current step is the last one checked
(so that the env, not the runtime's turn limit, ends every episode) and the steps never reached
count as reward 0.

``extras``: ``task_dir`` (a task folder), or ``task`` (a name) with ``env_config["tasks_dir"]``,
and optionally ``max_turns``; both may also sit under ``extras["extras"]`` (a whole dataset row
passed as extras, as the trainers do).
``env_config``: ``max_turns``, ``parser`` and any :class:`~harbor_adapter.types.TrialSettings`
field (``command_timeout_s``, ``agent_timeout_s``...). The container starts in ``init``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from harbor_adapter.errors import RewardError, TrialError, TrialTimeoutError
from harbor_adapter.loader import bundled_tasks_dir, load_task
from harbor_adapter.reward import combine_steps
from harbor_adapter.trial import Trial
from harbor_adapter.types import HarborTask, RewardStrategy, TrialSettings, VerifierResult
from skyrl_gym.config import config_get
from skyrl_gym.core import BaseTextEnv
from skyrl_gym.errors import ConfigError, did_you_mean
from skyrl_gym.sandbox.terminal import TerminalSettings, TerminalTools, Workspace, turn_observation
from skyrl_gym.sandbox.types import ExecResult, MiB
from skyrl_gym.tools import truncate_middle
from skyrl_gym.types import BaseTextEnvStepOutput, ConversationType, EnvExample

__all__ = ["TerminalEnv", "HarborTools", "task_prompt", "tool_call", "SYSTEM_PROMPT", "TOOL_NAMES"]

#: The agent's tools (of :class:`~skyrl_gym.sandbox.TerminalTools`), in this order.
TOOL_NAMES = ("bash", "read_file", "write_file", "submit")
#: The observation of a turn without a tool call.
NO_TOOL_CALL = (
    "No tool call found. Call a tool like this: "
    '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call> '
    'or finish with <tool_call>{"name": "submit", "arguments": {}}</tool_call>'
)

_ENV_KEYS = {"max_turns", "parser", "tasks_dir"}
_SETTINGS_KEYS = {f.name for f in dataclasses.fields(TrialSettings)}

SYSTEM_PROMPT = """You are an agent working in a Linux terminal to complete a task.
Call one tool per turn, exactly like this:
<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>
Tools:
- bash(command): run a shell command in the task's working directory (a fresh shell each time).
- read_file(path): show a file.
- write_file(path, content): create or replace a file.
- submit(): say you are done; your work is then checked.
Call submit when the task is complete."""


def tool_call(name: str, **arguments: Any) -> str:
    """One Hermes-style tool call as the model would write it (for scripted agents and tests)."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def task_prompt(task: HarborTask) -> list[dict[str, str]]:
    """The first messages of an episode of ``task``: the tool protocol and the instruction."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task.instruction},
    ]


def _settings_and_options(env_config: Any) -> tuple[TrialSettings, int, str, str | None]:
    keys = set(env_config.keys()) if hasattr(env_config, "keys") else set()
    unknown = keys - _ENV_KEYS - _SETTINGS_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(
            f"unknown harbor env_config key {key!r}; known: {sorted(_ENV_KEYS | _SETTINGS_KEYS)}."
            + did_you_mean(key, _ENV_KEYS | _SETTINGS_KEYS)
        )
    values = {k: config_get(env_config, k, None) for k in _SETTINGS_KEYS}
    settings = TrialSettings(**{k: v for k, v in values.items() if v is not None})
    max_turns = int(config_get(env_config, "max_turns", 20))
    if max_turns < 1:
        raise ConfigError(f"harbor env: max_turns must be >= 1, got {max_turns}")
    parser = str(config_get(env_config, "parser", "hermes"))
    tasks_dir = config_get(env_config, "tasks_dir", None)
    return settings, max_turns, parser, None if tasks_dir is None else str(tasks_dir)


def _from_row(extras: Any, key: str) -> Any:
    """``extras[key]``, or ``extras["extras"][key]`` when the whole dataset row is the extras
    (the trainers' convention; rows of ``skyrl harbor prompts`` keep the key under ``extras``)."""
    if not hasattr(extras, "get"):
        return None
    value = extras.get(key)
    inner = extras.get("extras")
    if value is None and hasattr(inner, "get"):
        value = inner.get(key)
    return value


def _resolve_task(extras: Any, tasks_dir: str | None) -> HarborTask:
    task_dir = _from_row(extras, "task_dir")
    if task_dir:
        return load_task(task_dir)
    name = _from_row(extras, "task")
    if name and tasks_dir:
        from harbor_adapter.loader import load_tasks

        tasks = {t.name: t for t in load_tasks(tasks_dir)}
        if name not in tasks:
            raise ConfigError(f"no task {name!r} in {tasks_dir}." + did_you_mean(str(name), tasks))
        return tasks[name]
    raise ConfigError(
        "the harbor env needs extras={'task_dir': <task folder>} (or extras={'task': name} with "
        "env_config={'tasks_dir': ...}); rows from `skyrl harbor prompts TASKS_DIR` have it"
    )


class HarborTools(TerminalTools):
    """The terminal tools of a :class:`TerminalEnv`; commands run through its trial (the agent
    budget) and read as ``exit code: N``, then stdout and stderr, each cut to ``output_chars``."""

    def __init__(self, env: TerminalEnv) -> None:
        settings = TerminalSettings(
            command_timeout_s=env.settings.command_timeout_s,
            max_observation_chars=env.settings.output_chars,
            max_file_bytes=4 * MiB,
        )
        super().__init__(env, tools=TOOL_NAMES, settings=settings)
        self._env = env

    def run_command(self, command: str) -> ExecResult | str:
        trial = self._env.trial
        if trial is None:
            raise TrialError("the episode has not started (call init first)")
        try:
            return trial.run(command)
        except TrialTimeoutError:
            self._env.out_of_time = True
            return "The time for this task is up; no more commands run."

    def describe_command(self, result: ExecResult) -> str:
        cap = self.settings.max_observation_chars
        parts = [f"exit code: {result.exit_code}"]
        if result.timed_out:
            parts.append("(the command ran past its deadline and was killed)")
        if result.stdout:
            parts.append(truncate_middle(result.stdout, cap)[0])
        if result.stderr:
            parts.append("[stderr]\n" + truncate_middle(result.stderr, cap)[0])
        return "\n".join(parts)


class TerminalEnv(BaseTextEnv):
    """A Harbor task with a terminal: tools in the task's container, reward from its verifier."""

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras)
        self.settings, self.max_turns, self.parser, tasks_dir = _settings_and_options(env_config or {})
        row_turns = _from_row(self.extras, "max_turns")  # a row may set its own turn limit
        if row_turns is not None:
            self.max_turns = int(row_turns)
            if self.max_turns < 1:
                raise ConfigError(f"harbor env: max_turns must be >= 1, got {self.max_turns}")
        self.task = _resolve_task(self.extras, tasks_dir)
        self.trial: Trial | None = None
        self.init_tool_groups([HarborTools(self)])
        self.submitted = False
        self.out_of_time = False
        self.verifier: VerifierResult | None = None
        self.tool_calls = 0
        self.format_errors = 0
        self.step_index = 0
        self.step_results: list[tuple[str, VerifierResult]] = []
        self._given = 0.0  # reward handed out on earlier steps' last turns
        self._concluded = False  # a multi-step task's reward is combined
        self._closed = False

    @classmethod
    def example(cls) -> EnvExample:
        task = load_task(bundled_tasks_dir() / "hello-file")
        return EnvExample(
            env_config={"max_turns": 4, "command_timeout_s": 20},
            extras={"task_dir": str(task.path)},
            prompt=tuple(task_prompt(task)),
            good_actions=(
                tool_call("bash", command="printf 'hello, harbor\\n' > /app/hello.txt"),
                tool_call("submit"),
            ),
        )

    # ------------------------------------------------------------------ episode
    @property
    def workspace(self) -> Workspace:
        """The task's running container and its working directory (what the tools act on)."""
        trial = self.trial
        if trial is None or trial.sandbox is None:
            raise TrialError("the episode has not started (call init first)")
        return Workspace(trial.sandbox, trial.workdir)

    def init(self, prompt: ConversationType | None = None) -> tuple[ConversationType, dict[str, Any]]:
        """Build (cached) and start the task's container; return the first messages (``prompt``
        when given, else the tool protocol and the task's instruction)."""
        if self._closed:
            raise ConfigError("this harbor env is closed; make a new one for a new episode")
        if self.trial is None:
            self.trial = Trial(self.task, self.settings)
            self.trial.start()
            if self.task.steps:
                self.trial.begin_step(self.task.steps[0])
        messages = list(prompt) if prompt else task_prompt(self.task)
        return messages, {"task": self.task.name, "image": self.trial.image}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.trial is None or self._closed:
            raise TrialError("step() before init() or after close(): the episode has no container")
        self.turns += 1
        results = self.call_tools(action, self.parser, timeout=None)  # a broken container raises
        self.tool_calls += len(results)
        meta: dict[str, Any] = {"tool_calls": [{"name": r.name, "error": r.error} for r in results]}
        out_of_turns = self.turns >= self.max_turns
        if self.submitted or self.out_of_time or out_of_turns or self.trial.agent_time_left() <= 0:
            if self.task.steps:
                return self._finish_step(meta, out_of_turns=out_of_turns)
            return self._finish(meta)
        if not results:
            self.format_errors += 1
            meta["error"] = "format"
        content = turn_observation(results, NO_TOOL_CALL, self.max_turns - self.turns)
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": content}], reward=0.0, done=False, metadata=meta
        )

    def _verify(self, *, last: bool) -> VerifierResult:
        """Run the verifier (of the current step); a result without a reward raises."""
        assert self.trial is not None
        self.trial.end_agent_phase()
        result = self.trial.verify(last=last)
        self.verifier = result
        if not result.ok:
            where = f", step {self.trial.step.name!r}" if self.trial.step is not None else ""
            raise RewardError(f"task {self.task.name!r}{where}: {result.error}")
        return result

    def _finish(self, meta: dict[str, Any]) -> BaseTextEnvStepOutput:
        """End the agent phase, run the verifier, and return the final step (or raise)."""
        result = self._verify(last=True)
        meta.update(
            verifier={
                "reward": result.reward,
                "metrics": dict(result.metrics),
                "exit_code": result.exit_code,
            },
            timings=self.timings(),
        )
        return BaseTextEnvStepOutput(
            observations=[],
            reward=float(result.reward),  # type: ignore[arg-type]
            done=True,
            metadata=meta,
            truncated=not self.submitted,
        )

    def _finish_step(self, meta: dict[str, Any], *, out_of_turns: bool) -> BaseTextEnvStepOutput:
        """End the current step of a multi-step task: verify it, then begin the next step (its
        instruction is the observation) or end the episode with the task's reward."""
        assert self.trial is not None
        steps = self.task.steps
        step = steps[self.step_index]
        last = out_of_turns or self.step_index == len(steps) - 1
        result = self._verify(last=last)
        self.step_results.append((step.name, result))
        gate = None if last else step.config.gate_failure(result.metrics)
        unreached = len(steps) - 1 - self.step_index if out_of_turns else 0
        if unreached:
            meta["stopped"] = f"the episode's max_turns={self.max_turns} ran out in step {step.name!r}"
        meta["step"] = {
            "name": step.name,
            "index": self.step_index,
            "reward": result.reward,
            "metrics": dict(result.metrics),
            "submitted": self.submitted,
        }
        if last or gate is not None:
            if gate is not None:
                meta["stopped"] = gate
                self.trial.close()  # no later step runs in it
            combined = self._combine(unreached)
            meta.update(
                verifier={"reward": combined.reward, "metrics": dict(combined.metrics)},
                timings=self.timings(),
            )
            turn_reward, self._given = float(combined.reward) - self._given, float(combined.reward)  # type: ignore[arg-type]
            return BaseTextEnvStepOutput(
                observations=[], reward=turn_reward, done=True, metadata=meta, truncated=not self.submitted
            )
        share = (
            float(result.reward) / len(steps)
            if self.task.config.reward_strategy is RewardStrategy.MEAN
            else 0.0
        )  # type: ignore[arg-type]
        self._given += share
        self.step_index += 1
        self.submitted = self.out_of_time = False
        following = steps[self.step_index]
        self.trial.begin_step(following)
        content = (
            f"Step {self.step_index} of {len(steps)} is done and has been checked. "
            f"Step {self.step_index + 1} of {len(steps)}:\n\n{following.instruction}"
        )
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": content}], reward=share, done=False, metadata=meta
        )

    def _combine(self, unreached: int = 0) -> VerifierResult:
        """The task's result from its steps' (all of which have a reward), kept as
        :attr:`verifier`. ``unreached`` steps (the episode's turns ran out before them) count as
        reward 0: stopping early must not pay more than trying the next step."""
        reward, metrics = combine_steps(
            [(float(r.reward), r.metrics) for _, r in self.step_results]  # type: ignore[arg-type]
            + [(0.0, {})] * unreached,
            self.task.config.reward_strategy,
        )
        last = self.step_results[-1][1]
        self.verifier = VerifierResult(
            reward,
            metrics,
            exit_code=last.exit_code,
            seconds=sum(r.seconds for _, r in self.step_results),
            output=last.output,
        )
        self._concluded = True
        return self.verifier

    def finish(self) -> VerifierResult:
        """End the agent phase now and run the verifier (for runners that stop an agent from the
        outside); returns the result, error included, without raising for a bad reward. In a
        multi-step task the current step is the last one run."""
        if self.trial is None:
            raise TrialError("finish() before init()")
        if self.task.steps:
            if not self._concluded:
                self.trial.end_agent_phase()
                result = self.trial.verify(last=True)
                if not result.ok:
                    self.verifier = result
                    return result
                self.step_results.append((self.task.steps[self.step_index].name, result))
                self._combine()
        elif self.verifier is None:
            self.trial.end_agent_phase()
            self.verifier = self.trial.verify()
        assert self.verifier is not None
        return self.verifier

    # ------------------------------------------------------------------ metrics, close
    def get_metrics(self) -> dict[str, Any]:
        trial, result = self.trial, self.verifier
        metrics: dict[str, Any] = {
            "solved": bool(result is not None and result.ok and (result.reward or 0) >= 1.0),
            "submitted": self.submitted,
            "agent_timed_out": self.out_of_time,
            "tool_calls": self.tool_calls,
            "format_errors": self.format_errors,
            "commands": trial.commands if trial else 0,
            "verifier_error": bool(result is not None and not result.ok),
        }
        if result is not None and result.ok:
            metrics.update({f"verifier/{k}": v for k, v in result.metrics.items()})
        if self.task.steps:
            metrics["steps_run"] = len(self.step_results)
            metrics.update({f"step/{name}/reward": r.reward for name, r in self.step_results})
        return metrics

    def timings(self) -> dict[str, float]:
        """Seconds spent building, starting, in the agent phase and in the verifier (kept out of
        ``get_metrics``, which must be the same for the same actions; the last step's metadata
        carries them)."""
        trial, result = self.trial, self.verifier
        return {
            "build_seconds": trial.build_seconds if trial else 0.0,
            "start_seconds": trial.start_seconds if trial else 0.0,
            "agent_seconds": trial.agent_seconds if trial else 0.0,
            "verifier_seconds": result.seconds if result else 0.0,
        }

    def close(self) -> None:
        """Remove the container. Idempotent."""
        self._closed = True
        if self.trial is not None:
            self.trial.close()
