"""``code`` and ``code_multi_turn``: LiveCodeBench-style programming tasks graded in a sandbox.

``code``: one turn. The model answers with a fenced code block; the last ```` ```python ````
(or untagged) block is run against the row's hidden tests (``reward_spec.ground_truth``, see
:mod:`skyrl_gym.envs.code.parsing`) in a sandbox with per-test and overall deadlines. Reward 1.0
when every test passes, else 0.0; no code block gives 0 and ``metadata["error"] == "format"``.

``code_multi_turn``: the same task plus a ``python`` tool, called Hermes style::

    <tool_call>{"name": "python", "arguments": {"code": "print(sum(range(10)))"}}</tool_call>

that runs code in the same sandbox (with its own deadline) so the model can try things first.
The episode ends on the final answer (a turn with a fenced block and no tool call) or at
``max_turns`` (default 4).

The sandbox (``env_config["sandbox"]``: ``"local"``, the default, or ``"docker"`` for a strict
container of ``skyrl-sandbox/python``) is made at the first run by
:func:`~skyrl_gym.sandbox.make_sandbox` from :func:`sandbox_spec` and closed by ``close()``
(``pool_size > 0``: leased from a shared warm Docker pool and given back). The model's mistakes
(no block, syntax errors, crashes, timeouts, floods of output) are metadata and reward 0; a
sandbox failure (``SandboxError``: the Docker daemon gone) raises out of ``step`` so that the
runtime records it instead of training on a false 0.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from skyrl_gym.config import config_get
from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs.code.data import load_bundled_rows, reference_of
from skyrl_gym.envs.code.grader import grade, not_compiled
from skyrl_gym.envs.code.parsing import extract_code, parse_tests
from skyrl_gym.envs.code.types import CodeEnvConfig, GradeReport
from skyrl_gym.errors import ConfigError
from skyrl_gym.sandbox import make_sandbox
from skyrl_gym.sandbox.python_tool import format_result, run_python
from skyrl_gym.sandbox.types import MiB, Sandbox, SandboxLimits, SandboxSpec
from skyrl_gym.tools import ToolGroup, tool
from skyrl_gym.types import BaseTextEnvStepOutput, EnvExample

__all__ = ["CodeEnv", "CodeMultiTurnEnv", "CodeTools", "make_config", "sandbox_spec", "sandbox_limits"]


def make_config(env_config: Any, extras: Any = None) -> CodeEnvConfig:
    """The env's :class:`CodeEnvConfig` from ``env_config`` (dict or attribute style); a row's
    ``extras["test_timeout_s"]`` overrides the per-test deadline."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(CodeEnvConfig):
        value = config_get(env_config, f.name, None)
        if value is not None:
            values[f.name] = value
    if extras and extras.get("test_timeout_s") is not None:
        values["test_timeout_s"] = float(extras["test_timeout_s"])
    return CodeEnvConfig(**values)


def sandbox_limits(config: CodeEnvConfig) -> SandboxLimits:
    """The sandbox limits of a code env."""
    return SandboxLimits(
        cpus=1.0,
        memory_bytes=config.memory_mb * MiB,
        pids=config.pids,
        timeout_s=max(config.test_timeout_s, config.tool_timeout_s),
        grace_s=0.5,
        output_bytes=config.output_bytes,
        file_size_bytes=64 * MiB,
        tmp_bytes=64 * MiB,
        workspace_bytes=128 * MiB,
        ttl_s=30 * 60,
    )


def sandbox_spec(config: CodeEnvConfig) -> SandboxSpec:
    """The sandbox of a code env's episode: local, or a strict container of ``config.image``
    (leased from a shared warm pool when ``pool_size > 0``)."""
    return SandboxSpec(config.sandbox, sandbox_limits(config), image=config.image, pool_size=config.pool_size)


def _tests_of(extras: Any) -> list:
    try:
        spec = extras["reward_spec"]
        truth = spec["ground_truth"]
    except (KeyError, TypeError):
        raise ConfigError(
            "code envs need extras={'reward_spec': {'ground_truth': <tests>}}; "
            "rows from skyrl_gym.envs.code.load_bundled_rows() have it"
        ) from None
    func_name = spec.get("func_name") if hasattr(spec, "get") else None
    meta = extras.get("metadata") if hasattr(extras, "get") else None
    if func_name is None and isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError:
            meta = None
    if func_name is None and hasattr(meta, "get"):
        func_name = meta.get("func_name")
    return parse_tests(truth, func_name=func_name)


class CodeEnv(BaseTextEnv):
    """Write a program in one turn; reward 1.0 when it passes every hidden test."""

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras)
        self.config = make_config(env_config, self.extras)
        self.tests = _tests_of(self.extras)
        self.max_turns = 1
        self._sandbox: Sandbox | None = None
        self._closed = False
        self.report: GradeReport | None = None
        self.format_error = False

    @classmethod
    def bundled_rows(cls, split: str = "train", n: int = 0, seed: int = 0) -> list[dict[str, Any]]:
        """The bundled problems (LiveCodeBench-style rows); train and test problems are disjoint."""
        if split not in ("train", "test"):
            raise ConfigError(f"unknown split {split!r}; use 'train' or 'test'")
        rows = load_bundled_rows(split)  # type: ignore[arg-type]
        return rows[:n] if n else rows

    @classmethod
    def example(cls) -> EnvExample:
        row = load_bundled_rows("test")[0]
        return EnvExample(
            extras={"reward_spec": row["reward_spec"]},
            prompt=tuple(row["prompt"]),
            good_actions=(f"Here is my solution.\n```python\n{reference_of(row['id'])}```",),
        )

    # ------------------------------------------------------------------ sandbox
    @property
    def sandbox(self) -> Sandbox:
        """The episode's sandbox, made on first use."""
        if self._closed:
            raise ConfigError("this code env is closed; make a new one for a new episode")
        if self._sandbox is None:
            self._sandbox = make_sandbox(sandbox_spec(self.config))
        return self._sandbox

    def close(self) -> None:
        """Close the sandbox (a pooled one goes back to its pool). Idempotent."""
        self._closed = True
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()

    # ------------------------------------------------------------------ grading
    def grade_program(self, code: str) -> GradeReport:
        """Run ``code`` against this episode's hidden tests (no sandbox is made for a program
        that does not compile)."""
        failed = not_compiled(code, self.tests)
        if failed is not None:
            return failed
        return grade(
            self.sandbox,
            code,
            self.tests,
            test_timeout_s=self.config.test_timeout_s,
            total_timeout_s=self.config.total_timeout_s,
            stop_at_first_failure=self.config.stop_at_first_failure,
            python=self.config.python,
        )

    def extract_program(self, action: str) -> str | None:
        """The program in a final answer: the last fenced Python (or untagged) block, or None.

        Subclasses that read answers another way (``lcb``) override it."""
        return extract_code(action)

    def _answer(self, action: str) -> tuple[float, dict[str, Any]]:
        """Grade the program of ``action`` (:meth:`extract_program`): (reward, metadata)."""
        code = self.extract_program(action)
        if code is None:
            self.format_error = True
            return 0.0, {"error": "format", "message": "no ```python code block in the answer"}
        self.format_error = False
        self.report = report = self.grade_program(code)
        meta: dict[str, Any] = {
            "passed": report.all_passed,
            "tests_passed": report.n_passed,
            "tests_total": report.n_tests,
            "tests": [r.to_dict() for r in report.results],
        }
        if report.compile_error is not None:
            meta["error"] = "compile_error"
            meta["message"] = report.compile_error
        elif report.overall_timeout:
            meta["error"] = "overall_timeout"
        return float(report.all_passed), meta

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        reward, meta = self._answer(action)
        return BaseTextEnvStepOutput(
            observations=[], reward=reward, done=True, metadata=meta, truncated=False
        )

    def get_metrics(self) -> dict[str, Any]:
        report = self.report
        return {
            "solved": bool(report and report.all_passed),
            "tests_passed": report.n_passed / report.n_tests if report else 0.0,
            "compile_error": bool(report and report.compile_error is not None),
            "timeout": bool(report and report.timed_out),
            "format_error": self.format_error,
        }


class CodeTools(ToolGroup):
    """The ``python`` tool of ``code_multi_turn``: runs code in the env's sandbox."""

    def __init__(self, env: CodeEnv) -> None:
        super().__init__(name="code_tools")
        self._env = env

    @tool
    def python(self, code: str) -> str:
        """Run a Python 3 program and return what it printed (stdout, then stderr).

        Args:
            code: The complete program. Use print() to see values; variables do not persist
                between calls, files in the working directory do.
        """
        timeout = self._env.config.tool_timeout_s
        result = run_python(self._env.sandbox, code, timeout=timeout, python=self._env.config.python)
        return format_result(result, timeout=timeout)


class CodeMultiTurnEnv(CodeEnv):
    """The ``code`` task with a ``python`` tool to try code before the final fenced answer."""

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras)
        self.max_turns = int(self.extras.get("max_turns", self.config.max_turns))
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {self.max_turns}")
        self.init_tool_groups([CodeTools(self)])
        self.tool_calls = 0
        self.answered = False

    @classmethod
    def example(cls) -> EnvExample:
        row = load_bundled_rows("test", env_class="code_multi_turn")[0]
        call = json.dumps({"name": "python", "arguments": {"code": "print(2 + 2)"}})
        return EnvExample(
            extras={"reward_spec": row["reward_spec"]},
            prompt=tuple(row["prompt"]),
            good_actions=(
                f"<tool_call>{call}</tool_call>",
                f"```python\n{reference_of(row['id'])}```",
            ),
        )

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        results = self.call_tools(action, "hermes", timeout=None)
        left = self.max_turns - self.turns
        if not results and extract_code(action) is not None:
            self.answered = True
            reward, meta = self._answer(action)
            return BaseTextEnvStepOutput(
                observations=[], reward=reward, done=True, metadata=meta, truncated=False
            )
        meta: dict[str, Any] = {}
        if results:
            self.tool_calls += len(results)
            meta["tool_calls"] = [{"name": r.name, "error": r.error} for r in results]
            content = "\n".join(f"<tool_response>{r.content}</tool_response>" for r in results)
        else:
            meta["error"] = "format"
            content = "Call the python tool with a <tool_call>, or give your final answer in a ```python code block."
        done = left <= 0
        if not done:
            content += f"\n({left} turn{'s' if left != 1 else ''} left)"
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": content}],
            reward=0.0,
            done=done,
            metadata=meta,
            truncated=done,
        )

    def get_metrics(self) -> dict[str, Any]:
        return {**super().get_metrics(), "tool_calls": self.tool_calls, "answered": self.answered}
