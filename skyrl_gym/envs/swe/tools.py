"""The agent's tools in a repository: ``bash``, ``view``, ``str_replace``, ``create``, ``submit``.

They act on the env's workspace (a sandbox holding the repository). Paths are relative to the
repository's root (absolute paths inside the sandbox work too). A model's mistake (a missing
file, an ``old_str`` that is not there or not unique) raises inside the tool, which the tool
executor turns into an error observation; a sandbox failure is remembered by the env and raised
out of ``step`` (an infrastructure failure, never a silent reward 0).
"""

from __future__ import annotations

import posixpath
from collections import Counter
from typing import TYPE_CHECKING, Protocol

from skyrl_gym.errors import SandboxError
from skyrl_gym.sandbox.types import SandboxFileNotFoundError
from skyrl_gym.tools import ToolGroup, tool, truncate_middle

if TYPE_CHECKING:
    from skyrl_gym.envs.swe._runtime import Workspace
    from skyrl_gym.envs.swe.types import SWEEnvConfig

__all__ = ["SWETools", "TOOL_NAMES"]

TOOL_NAMES = ("bash", "view", "str_replace", "create", "submit")
_MAX_FILE_BYTES = 2 * 1024 * 1024


class SWEToolHost(Protocol):
    """What the tools use of the env they serve (``SWEEnv``): its settings, its workspace, and
    the counters they keep."""

    config: SWEEnvConfig
    workspace: Workspace
    tool_calls: Counter[str]
    submitted: bool
    infra_error: SandboxError | None


class SWETools(ToolGroup):
    """The tools of the ``swe`` env, bound to one env (and so one workspace)."""

    def __init__(self, env: SWEToolHost) -> None:
        super().__init__(name="swe_tools")
        self._env = env

    # ------------------------------------------------------------------ helpers
    def _cap(self, text: str) -> str:
        return truncate_middle(text, self._env.config.max_observation_chars)[0]

    def _path(self, path: str) -> str:
        root = self._env.workspace.root
        full = posixpath.normpath(posixpath.join(root, path))
        return full

    def _shown(self, full: str) -> str:
        root = self._env.workspace.root
        return posixpath.relpath(full, root) if full == root or full.startswith(root + "/") else full

    def _infra(self, exc: SandboxError) -> SandboxError:
        if not isinstance(exc, SandboxFileNotFoundError):
            self._env.infra_error = exc
        return exc

    def _read(self, full: str) -> str:
        try:
            data = self._env.workspace.sandbox.read_file(full, max_bytes=_MAX_FILE_BYTES)
        except SandboxFileNotFoundError:
            raise FileNotFoundError(f"{self._shown(full)} does not exist") from None
        except SandboxError as exc:
            if "not a regular file" in str(exc):
                raise IsADirectoryError(f"{self._shown(full)} is not a regular file") from None
            if "max_bytes" in str(exc):
                raise ValueError(
                    f"{self._shown(full)} is larger than 2 MiB; use bash (head, sed -n)"
                ) from None
            raise self._infra(exc) from None
        return data.decode("utf-8", errors="replace")

    def _run(self, argv: list[str] | str, timeout: float | None = None) -> tuple[int, str]:
        ws = self._env.workspace
        try:
            result = ws.sandbox.exec(argv, timeout=timeout, env=ws.env, workdir=ws.root)
        except SandboxError as exc:
            raise self._infra(exc) from None
        out = result.stdout + (("\n" if result.stdout and result.stderr else "") + result.stderr)
        if result.timed_out:
            out += f"\n[the command timed out after {timeout:g} s and was killed]"
        return result.exit_code, out

    # ------------------------------------------------------------------ tools
    @tool
    def bash(self, command: str) -> str:
        """Run a shell command in the repository's root and return its output and exit code.

        Args:
            command: The command, e.g. `grep -rn "def merge" .` or `python3 -m pytest -q tests`.
        """
        self._env.tool_calls["bash"] += 1
        timeout = self._env.config.command_timeout_s
        code, out = self._run(["/bin/bash", "-c", command], timeout=timeout)
        text = out.rstrip("\n") or "[no output]"
        return self._cap(f"{text}\n[exit code {code}]")

    @tool
    def view(self, path: str, start_line: int = 1, end_line: int = -1) -> str:
        """Show a file with line numbers, or list a directory (two levels, hidden files omitted).

        Args:
            path: File or directory, relative to the repository's root.
            start_line: First line to show (1-based).
            end_line: Last line to show; -1 for the end of the file.
        """
        self._env.tool_calls["view"] += 1
        full = self._path(path)
        code, kind = self._run(
            [
                "/bin/sh",
                "-c",
                'if [ -d "$1" ]; then echo dir; elif [ -e "$1" ]; then echo file; fi',
                "view",
                full,
            ]
        )
        kind = kind.strip()
        if kind == "dir":
            _, listing = self._run(
                ["find", full, "-maxdepth", "2", "-not", "-path", "*/.*", "-not", "-name", "__pycache__"]
            )
            lines = sorted(self._shown(line) for line in listing.splitlines() if line.strip())
            return self._cap("\n".join(lines))
        if kind != "file":
            raise FileNotFoundError(f"{path} does not exist")
        lines = self._read(full).splitlines()
        if start_line < 1:
            raise ValueError("start_line must be at least 1")
        last = len(lines) if end_line == -1 else min(end_line, len(lines))
        if last < start_line and lines:
            raise ValueError(f"empty range: the file has {len(lines)} lines")
        width = len(str(max(last, 1)))
        body = "\n".join(f"{n:>{width}}\t{lines[n - 1]}" for n in range(start_line, last + 1))
        return self._cap(body or "[empty file]")

    @tool
    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        """Replace the one occurrence of `old_str` in a file with `new_str`.

        Args:
            path: The file, relative to the repository's root.
            old_str: Text to replace; must occur exactly once (include surrounding lines to make it unique).
            new_str: The replacement text.
        """
        self._env.tool_calls["str_replace"] += 1
        full = self._path(path)
        text = self._read(full)
        count = text.count(old_str) if old_str else 0
        if count == 0:
            raise ValueError(f"old_str was not found in {path}; view the file and copy the text exactly")
        if count > 1:
            raise ValueError(f"old_str occurs {count} times in {path}; include more lines to make it unique")
        new_text = text.replace(old_str, new_str, 1)
        self._write(full, new_text)
        first = text[: text.index(old_str)].count("\n") + 1
        lines = new_text.splitlines()
        lo, hi = max(1, first - 3), min(len(lines), first + new_str.count("\n") + 3)
        snippet = "\n".join(f"{n}\t{lines[n - 1]}" for n in range(lo, hi + 1))
        return self._cap(f"Edited {path}. Lines {lo}-{hi} now read:\n{snippet}")

    @tool
    def create(self, path: str, file_text: str) -> str:
        """Create a new file with the given content (fails if the file exists; edit it with str_replace).

        Args:
            path: The new file, relative to the repository's root.
            file_text: The whole content of the file.
        """
        self._env.tool_calls["create"] += 1
        full = self._path(path)
        code, _ = self._run(["test", "-e", full])
        if code == 0:
            raise FileExistsError(f"{path} exists; change it with str_replace")
        self._write(full, file_text)
        return f"Created {path} ({len(file_text.splitlines())} lines)."

    @tool
    def submit(self) -> str:
        """Finish: your changes to the repository (its git diff) are graded by hidden tests."""
        self._env.tool_calls["submit"] += 1
        self._env.submitted = True
        return "Submitted."

    def _write(self, full: str, text: str) -> None:
        try:
            self._env.workspace.sandbox.write_file(full, text)
        except SandboxError as exc:
            raise self._infra(exc) from None
