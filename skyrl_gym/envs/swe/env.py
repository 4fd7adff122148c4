"""``swe``: repair a repository so that hidden tests pass (SWE-bench style).

The row (``extras``) is an SWE-bench instance (see :mod:`skyrl_gym.envs.swe.instances`). The
agent works in a sandbox with the repository at ``base_commit`` (no later history, no hidden
tests) through five tools, called Hermes style::

    <tool_call>{"name": "bash", "arguments": {"command": "grep -rn merge pocketlib"}}</tool_call>

``bash`` (deadline per command), ``view`` (file with line numbers, or directory),
``str_replace``, ``create`` and ``submit`` (:class:`~skyrl_gym.sandbox.TerminalTools`).
Observations are capped at ``max_observation_chars`` and cut in the middle with a marker. A
model's mistake (a missing file, an ``old_str`` that is not there) is an error observation; a
sandbox failure raises out of ``step`` through the tool executor (a
:class:`~skyrl_gym.errors.SandboxError`, an infrastructure failure: the episode is masked).
The episode ends at ``submit`` or at ``max_turns`` (the diff so far is graded then, unless
``grade_on_truncation`` is off). The final patch is the ``git diff`` of the working tree; it is
graded in a fresh sandbox by :func:`~skyrl_gym.envs.swe.grading.grade_patch`: reward 1.0 when
resolved, else 0.0, with the per-test results in the last step's metadata.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_gym.config import config_get
from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs.swe._repo import RepoSource, resolve_repo
from skyrl_gym.envs.swe._runtime import Workspace, open_workspace
from skyrl_gym.envs.swe.grading import GradingSetupError, grade_patch
from skyrl_gym.envs.swe.instances import bundled_instances, instance_from_row
from skyrl_gym.envs.swe.swesmith import with_test_patch
from skyrl_gym.envs.swe.types import GradeReport, SWEEnvConfig, SWEInstance
from skyrl_gym.errors import ConfigError, SandboxError
from skyrl_gym.sandbox.terminal import TerminalSettings, TerminalTools, turn_observation
from skyrl_gym.sandbox.types import MiB
from skyrl_gym.types import BaseTextEnvStepOutput, ConversationType, EnvExample

__all__ = ["SWEEnv", "make_config", "make_prompt", "instance_of", "rollout_rows", "DIFF_CMD", "TOOL_NAMES"]

#: The agent's tools (of :class:`~skyrl_gym.sandbox.TerminalTools`), in this order.
TOOL_NAMES = ("bash", "view", "str_replace", "create", "submit")
#: The observation of a turn without a tool call.
NO_TOOL_CALL = (
    "No tool call found. Call a tool as "
    '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>, '
    "or call submit when you are done."
)

#: The final patch: every change of the working tree against the base commit ``$1`` (new files
#: too, and also when the agent made commits of its own).
DIFF_CMD = 'git add -A >/dev/null 2>&1; git diff --cached --binary --no-color --no-ext-diff "$1"'

SYSTEM_PROMPT = """\
You are a software engineer. You fix an issue in a Python repository by editing its source files.
Call one tool per turn, written as
<tool_call>{"name": TOOL, "arguments": {...}}</tool_call>
Tools:
- bash(command): run a shell command in the repository's root (each command has a time limit).
- view(path, start_line=1, end_line=-1): show a file with line numbers, or list a directory.
- str_replace(path, old_str, new_str): replace the single occurrence of old_str in a file.
- create(path, file_text): create a new file.
- submit(): finish; hidden tests then judge your changes.
Paths are relative to the repository's root. Do not edit tests; they are replaced when grading."""


def make_config(env_config: Any) -> SWEEnvConfig:
    """The :class:`SWEEnvConfig` from ``env_config`` (dict or attribute style)."""
    values = {}
    for f in dataclasses.fields(SWEEnvConfig):
        value = config_get(env_config, f.name, None)
        if value is not None:
            values[f.name] = value
    return SWEEnvConfig(**values)


def instance_of(extras: Any) -> SWEInstance:
    """The instance a row describes: its SWE-bench fields, or ``extras["instance"]``."""
    if isinstance(extras, SWEInstance):
        return extras
    if extras is None or not hasattr(extras, "get"):
        raise ConfigError("the swe env needs extras with SWE-bench fields (an instance row)")
    inner = extras.get("instance")
    if isinstance(inner, SWEInstance):
        return inner
    row = inner if inner is not None else extras
    return instance_from_row(dict(row), base_dir=extras.get("task_dir"), where="extras")


def make_prompt(instance: SWEInstance) -> ConversationType:
    """The first messages of an episode: the tools and the issue."""
    user = (
        f"<issue>\n{instance.problem_statement.strip()}\n</issue>\n\n"
        f"The repository {instance.repo} is checked out at the commit where this issue was reported. "
        "Find the cause, fix it in the source code, check your fix, then call submit."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def rollout_rows(
    instances: Sequence[SWEInstance], env_config: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Dataset rows for the rollout engine (``skyrl rollout --prompts FILE``, ``load_prompts``):
    ``id``, ``env_id="swe"``, ``prompt``, ``env_config`` and the instance as ``extras``."""
    return [
        {
            "id": inst.instance_id,
            "env_id": "swe",
            "prompt": make_prompt(inst),
            "env_config": dict(env_config or {}),
            "extras": inst.to_row(),
        }
        for inst in instances
    ]


class SWEEnv(BaseTextEnv):
    """Repair a repository with bash and editing tools; hidden tests grade the git diff."""

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras if hasattr(extras, "get") else None)
        self.config = make_config(env_config)
        self.instance = instance_of(extras)
        max_turns = self.extras.get("max_turns") if hasattr(self.extras, "get") else None
        self.max_turns = int(max_turns or self.config.max_turns)
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {self.max_turns}")
        self.source = RepoSource(resolve_repo(self.instance, self.config.repos_dir))
        self.source.commit(self.instance.base_commit)  # fail now on a commit that is not there
        self.instance = with_test_patch(self.instance, self.source)  # a SWE-smith row's hidden tests
        settings = TerminalSettings(
            command_timeout_s=self.config.command_timeout_s,
            max_observation_chars=self.config.max_observation_chars,
            max_file_bytes=2 * MiB,
        )
        self.terminal = TerminalTools(self, tools=TOOL_NAMES, settings=settings, name="swe_tools")
        self.init_tool_groups([self.terminal])
        self._workspace: Workspace | None = None
        self._base_rev = "HEAD"
        self._closed = False
        self.submitted = False
        self.tool_errors = 0
        self.format_errors = 0
        self.patch: str | None = None
        self.report: GradeReport | None = None

    @classmethod
    def example(cls) -> EnvExample:
        inst = bundled_instances()[0]
        old = "if result and start < result[-1][1]:"
        new = "if result and start <= result[-1][1]:"
        edit = {
            "name": "str_replace",
            "arguments": {"path": "pocketlib/intervals.py", "old_str": old, "new_str": new},
        }
        return EnvExample(
            env_config={"sandbox": "local", "max_turns": 3},
            extras=inst.to_row(),
            prompt=tuple(make_prompt(inst)),
            good_actions=(
                f"<tool_call>{json.dumps(edit)}</tool_call>",
                '<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
            ),
        )

    # ------------------------------------------------------------------ workspace
    @property
    def workspace(self) -> Workspace:
        """The agent's sandbox with the repository, made on first use."""
        if self._closed:
            raise ConfigError("this swe env is closed; make a new one for a new episode")
        if self._workspace is None:
            ws = open_workspace(self.instance, self.source, self.config)
            head = ws.sandbox.exec(["git", "rev-parse", "HEAD"], workdir=ws.root, timeout=60)
            if not head.ok:
                ws.close()
                raise SandboxError(f"no git repository in the workspace of {self.instance.instance_id}")
            self._base_rev = head.stdout.strip()
            self._workspace = ws
        return self._workspace

    def close(self) -> None:
        """Remove the agent's sandbox. Idempotent."""
        self._closed = True
        ws, self._workspace = self._workspace, None
        if ws is not None:
            ws.close()

    # ------------------------------------------------------------------ episode
    def init(self, prompt: ConversationType | None = None) -> tuple[ConversationType, dict[str, Any]]:
        """The prompt as given, or :func:`make_prompt` when it is empty."""
        messages = list(prompt) if prompt else make_prompt(self.instance)
        return messages, {"instance_id": self.instance.instance_id}

    def current_patch(self) -> str:
        """The ``git diff`` of the working tree against the base commit.

        Raises ``ValueError`` when git cannot diff (the agent broke its ``.git``)."""
        if self._workspace is None:
            return ""  # the agent never touched the repository
        ws = self._workspace
        result = ws.sandbox.exec(
            ["/bin/sh", "-c", DIFF_CMD, "diff", self._base_rev], workdir=ws.root, timeout=120
        )
        if result.exit_code != 0:
            raise ValueError(f"git diff failed: {result.stderr.strip()[-500:]}")
        return result.stdout

    def _finish(self, meta: dict[str, Any], *, truncated: bool) -> BaseTextEnvStepOutput:
        diff_error = None
        try:
            self.patch = self.current_patch()
        except ValueError as exc:  # the model's doing: graded as no change at all
            self.patch, diff_error = "", str(exc)
        self.close()  # the agent's sandbox is done; grading uses a fresh one
        if truncated and not self.config.grade_on_truncation:
            meta.update(resolved=False, graded=False)
            return BaseTextEnvStepOutput(
                observations=[], reward=0.0, done=True, metadata=meta, truncated=True
            )
        self.report = grade_patch(self.instance, self.patch, config=self.config, source=self.source)
        if self.report.setup_error:  # the instance's fault, not the model's: the episode is masked
            raise GradingSetupError(
                f"{self.instance.instance_id}: listed tests never ran: {', '.join(self.report.missing[:5])}"
                f"{' ...' if len(self.report.missing) > 5 else ''}; fix the row's FAIL_TO_PASS/PASS_TO_PASS "
                "or its test_cmd (`skyrl swe check` finds such rows)"
            )
        meta.update(self.report.to_dict(), graded=True, patch=self.patch)
        if diff_error is not None:
            meta.update(error="diff_failed", message=diff_error)
        return BaseTextEnvStepOutput(
            observations=[], reward=self.report.reward, done=True, metadata=meta, truncated=truncated
        )

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        results = self.call_tools(action, self.config.parser, timeout=None)  # SandboxError raises
        meta: dict[str, Any] = {}
        if results:
            self.tool_errors += sum(not r.ok for r in results)
            meta["tool_calls"] = [{"name": r.name, "error": r.error} for r in results]
        else:
            self.format_errors += 1
            meta["error"] = "format"
        if self.submitted:
            return self._finish(meta, truncated=False)
        left = self.max_turns - self.turns
        if left <= 0:
            return self._finish(meta, truncated=True)
        content = turn_observation(results, NO_TOOL_CALL, left)
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": content}], reward=0.0, done=False, metadata=meta
        )

    def get_metrics(self) -> dict[str, Any]:
        report = self.report
        return {
            "resolved": bool(report and report.resolved),
            "submitted": self.submitted,
            "patch_applied": bool(report and report.patch_applied),
            "patch_lines": len(self.patch.splitlines()) if self.patch else 0,
            "f2p_passed": report.counts()["f2p_passed"] / max(1, report.counts()["f2p_total"])
            if report
            else 0.0,
            "turns": self.turns,
            "tool_errors": self.tool_errors,
            "format_errors": self.format_errors,
            **{f"calls_{name}": n for name, n in self.terminal.calls.items()},
        }
