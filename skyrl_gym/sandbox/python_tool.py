"""The Python code-execution tool: model-written Python runs in a :class:`Sandbox`.

Code envs give the model ``PythonTool(sandbox)``; every call runs ``python3`` inside the
sandbox under its limits (never a bare ``subprocess.run`` on the host), and whatever happens
(an exception, a timeout, an OOM kill, a flood of output) comes back as text for the model.
"""

from __future__ import annotations

import os
import posixpath

from skyrl_gym.sandbox.types import ExecResult, Sandbox
from skyrl_gym.tools import ToolGroup, tool

__all__ = ["PythonTool", "run_python", "format_result"]

# Code longer than this goes through a file (one argument may hold at most 128 KiB on Linux).
_ARGV_MAX = 100_000


def run_python(
    sandbox: Sandbox, code: str, *, timeout: float | None = None, python: str = "python3"
) -> ExecResult:
    """Run ``code`` with ``python`` inside ``sandbox`` and return the :class:`ExecResult`."""
    if len(code.encode()) <= _ARGV_MAX:
        return sandbox.exec([python, "-c", code], timeout=timeout)
    path = posixpath.join(sandbox.workdir, f".skyrl_code_{os.urandom(4).hex()}.py")
    sandbox.write_file(path, code)
    try:
        return sandbox.exec([python, path], timeout=timeout)
    finally:
        sandbox.exec(["rm", "-f", path], timeout=10)


def format_result(result: ExecResult, *, timeout: float | None = None) -> str:
    """What the model sees: stdout, then stderr, then a status line when it did not end well."""
    parts = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append(result.stderr.rstrip("\n"))
    if result.timed_out:
        limit = f" after {timeout:g} s" if timeout else ""
        parts.append(f"[timed out{limit}: the program was killed]")
    elif result.oom_killed:
        parts.append("[killed: out of memory]")
    elif result.signal is not None:
        parts.append(f"[killed by signal {result.signal} ({result.reason.value.replace('_', ' ')})]")
    elif result.exit_code != 0:
        parts.append(f"[exit code {result.exit_code}]")
    if result.output_truncated:
        parts.append("[output truncated in the middle]")
    return "\n".join(parts) if parts else "[no output]"


class PythonTool(ToolGroup):
    """A tool group with one tool, ``python``, that runs code in a sandbox.

    The sandbox (and so the limits) belongs to the env; the model only supplies code.
    ``timeout`` (seconds) overrides the sandbox's default per-command deadline.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        timeout: float | None = None,
        python: str = "python3",
        name: str = "python_tool",
    ) -> None:
        super().__init__(name)
        self.sandbox = sandbox
        self.timeout = timeout
        self.python_exe = python
        self.last_result: ExecResult | None = None

    @tool
    def python(self, code: str) -> str:
        """Run a Python 3 program and return what it printed (stdout, then stderr).

        Args:
            code: The complete program. Use print() to see values; state does not persist
                between calls, but files written to the working directory do.
        """
        if not isinstance(code, str):
            return f"[error: code must be a string, got {type(code).__name__}]"
        result = run_python(self.sandbox, code, timeout=self.timeout, python=self.python_exe)
        self.last_result = result
        limits = getattr(self.sandbox, "limits", None)
        timeout = self.timeout or (limits.timeout_s if limits is not None else None)
        return format_result(result, timeout=timeout)
