"""Terminal tools over a sandbox: ``bash``, file viewing and editing, ``submit``.

The tool group of the envs where a model works in a machine of its own (``swe``, Harbor's
``harbor``)::

    class RepoEnv(BaseTextEnv):
        def __init__(self, env_config=None, extras=None):
            super().__init__(env_config, extras)
            self.submitted = False
            self.terminal = TerminalTools(self, tools=("bash", "view", "str_replace", "submit"))
            self.init_tool_groups([self.terminal])

        @property
        def workspace(self) -> Workspace:  # made on first use, if you like
            ...

The tools act on ``host.workspace`` (:class:`Workspace`: a sandbox, the directory that paths are
relative to, the environment of commands); ``submit`` sets ``host.submitted``. An env offers the
tools it names (``tools=``, in that order):

- ``bash(command)``: ``bash -c`` in the root under ``command_timeout_s``; the output (stdout,
  then stderr), a note when the deadline killed it, and the exit code.
- ``view(path, start_line, end_line)``: a file with line numbers, or a directory two levels
  deep (hidden files omitted).
- ``str_replace(path, old_str, new_str)``: replace the one occurrence of ``old_str``.
- ``create(path, file_text)``: a new file (an existing one is refused).
- ``read_file(path)`` / ``write_file(path, content)``: a file's text; create or replace a file.
- ``submit()``: the model is done; the env ends the episode.

Observations are cut in the middle at ``max_observation_chars``. A subclass changes how a
command runs (:meth:`TerminalTools.run_command`: Harbor's goes through its trial's agent budget)
or reads (:meth:`TerminalTools.describe_command`).

Errors. What the model can fix raises an ordinary exception inside the tool, which the tool
executor shows to the model as a ``tool_error``: a missing file, a directory where a file was
expected, a file too large to show, a write the sandbox refused, an ``old_str`` that is not
there or not unique, a working directory a command removed. These come from the sandbox as
:class:`~skyrl_gym.sandbox.SandboxPathError` and are translated here. Any other
:class:`~skyrl_gym.errors.SandboxError` (the sandbox died, the Docker daemon went away) is an
:class:`~skyrl_gym.errors.InfrastructureError`: it passes through the executor and out of
``env.step``, and the runtime masks the episode.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from skyrl_gym.errors import ConfigError, ToolDefinitionError, did_you_mean
from skyrl_gym.sandbox.types import (
    Command,
    ExecResult,
    MiB,
    Sandbox,
    SandboxFileNotFoundError,
    SandboxFileTooLargeError,
    SandboxNotAFileError,
    SandboxPathError,
)
from skyrl_gym.tools import ToolGroup, ToolResult, tool, truncate_middle

__all__ = [
    "TerminalTools",
    "TerminalSettings",
    "TerminalHost",
    "Workspace",
    "TERMINAL_TOOLS",
    "turn_observation",
]

#: Every tool :class:`TerminalTools` can offer, in its order.
TERMINAL_TOOLS = ("bash", "view", "str_replace", "create", "read_file", "write_file", "submit")


@dataclass
class Workspace:
    """Where terminal tools act: a sandbox and the directory that relative paths start from."""

    sandbox: Sandbox
    """The sandbox commands and file operations run in."""
    root: str
    """The working directory of commands; relative paths are relative to it."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of the model's commands (on top of the sandbox's own)."""

    def close(self) -> None:
        """Remove the sandbox. Idempotent."""
        self.sandbox.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TerminalHost(Protocol):
    """What the tools use of the env they serve."""

    @property
    def workspace(self) -> Workspace:
        """The workspace (the env may make it on first use)."""
        ...

    submitted: bool
    """Set by ``submit``."""


@dataclass(frozen=True)
class TerminalSettings:
    """Limits of the terminal tools (the env's, never the model's)."""

    command_timeout_s: float | None = None
    """Deadline of one ``bash`` command; None: the sandbox's default (``limits.timeout_s``)."""
    max_observation_chars: int = 16_000
    """Longer observations (a command's output, a file) are cut in the middle with a marker."""
    max_file_bytes: int = 2 * MiB
    """Largest file ``view``, ``str_replace`` and ``read_file`` read."""

    def __post_init__(self) -> None:
        if self.command_timeout_s is not None and not self.command_timeout_s > 0:
            raise ConfigError(f"command_timeout_s must be > 0 or None, got {self.command_timeout_s!r}")
        if self.max_observation_chars < 100:
            raise ConfigError(f"max_observation_chars must be at least 100, got {self.max_observation_chars}")
        if self.max_file_bytes < 1:
            raise ConfigError(f"max_file_bytes must be positive, got {self.max_file_bytes}")


def turn_observation(results: Sequence[ToolResult], no_call: str, turns_left: int) -> str:
    """The user message after a turn: each result in ``<tool_response>`` tags (``no_call``, how
    to call a tool, when the turn held no call), then how many turns are left."""
    if results:
        body = "\n".join(f"<tool_response>{r.content}</tool_response>" for r in results)
    else:
        body = no_call
    return f"{body}\n({turns_left} turn{'s' if turns_left != 1 else ''} left)"


def _joined(result: ExecResult) -> str:
    """stdout, then stderr."""
    return result.stdout + ("\n" if result.stdout and result.stderr else "") + result.stderr


def _size(n: int) -> str:
    return f"{n / MiB:g} MiB" if n % MiB == 0 else f"{n} bytes"


class TerminalTools(ToolGroup):
    """Terminal tools bound to one env (and so one workspace); see the module docstring.

    Args:
        host: The env: its ``workspace`` and its ``submitted`` flag.
        tools: The tools to offer, by name (from :data:`TERMINAL_TOOLS`), in that order.
        settings: Deadlines and caps.
        name: The group's name.
    """

    def __init__(
        self,
        host: TerminalHost,
        *,
        tools: Sequence[str] = TERMINAL_TOOLS,
        settings: TerminalSettings | None = None,
        name: str = "terminal",
    ) -> None:
        super().__init__(name=name)
        unknown = [t for t in tools if t not in self._tool_registry]
        if unknown:
            raise ToolDefinitionError(
                f"no terminal tool {unknown[0]!r}; known: {list(self._tool_registry)}."
                + did_you_mean(unknown[0], self._tool_registry)
            )
        self._tool_registry = {t: self._tool_registry[t] for t in tools}
        self._host = host
        self.settings = settings or TerminalSettings()
        self.calls: Counter[str] = Counter({t: 0 for t in tools})
        """How often each tool was called."""

    # ------------------------------------------------------------------ what a subclass may change
    def run_command(self, command: str) -> ExecResult | str:
        """Run the model's command; an ``ExecResult``, or text that is the observation as it is."""
        return self._exec(["/bin/bash", "-c", command], timeout=self.settings.command_timeout_s)

    def describe_command(self, result: ExecResult) -> str:
        """The observation of a command: its output, a note when the deadline killed it, and
        the exit code, cut to ``max_observation_chars``."""
        out = _joined(result)
        if result.timed_out:
            limit = self.settings.command_timeout_s
            after = f"after {limit:g} s " if limit else ""
            out += f"\n[the command timed out {after}and was killed]"
        text = out.rstrip("\n") or "[no output]"
        return self._cap(f"{text}\n[exit code {result.exit_code}]")

    # ------------------------------------------------------------------ helpers
    def _cap(self, text: str) -> str:
        return truncate_middle(text, self.settings.max_observation_chars)[0]

    def _path(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self._host.workspace.root, path))

    def _shown(self, full: str) -> str:
        root = self._host.workspace.root
        return posixpath.relpath(full, root) if full == root or full.startswith(root + "/") else full

    def _exec(self, argv: Command, *, timeout: float | None = None) -> ExecResult:
        ws = self._host.workspace
        try:
            return ws.sandbox.exec(argv, timeout=timeout, env=ws.env, workdir=ws.root)
        except SandboxFileNotFoundError:
            raise self._no_workdir() from None

    def _no_workdir(self) -> FileNotFoundError:
        """The model's commands removed the working directory (so no command can start)."""
        return FileNotFoundError(f"the working directory {self._host.workspace.root} no longer exists")

    def _output(self, argv: Command) -> tuple[int, str]:
        result = self._exec(argv)
        return result.exit_code, _joined(result)

    def _read(self, full: str) -> str:
        shown = self._shown(full)
        limit = self.settings.max_file_bytes
        try:
            data = self._host.workspace.sandbox.read_file(full, max_bytes=limit)
        except SandboxFileNotFoundError:
            raise FileNotFoundError(f"no file {shown!r}") from None
        except SandboxNotAFileError:
            raise IsADirectoryError(f"{shown} is not a regular file") from None
        except SandboxFileTooLargeError:
            raise ValueError(f"{shown} is larger than {_size(limit)}; use bash (head, sed -n)") from None
        except SandboxPathError as exc:
            raise OSError(f"cannot read {shown!r}: {str(exc)[-300:]}") from None
        return data.decode("utf-8", errors="replace")

    def _write(self, full: str, text: str) -> None:
        try:
            self._host.workspace.sandbox.write_file(full, text)
        except SandboxPathError as exc:
            raise OSError(f"could not write {self._shown(full)!r}: {str(exc)[-300:]}") from None

    # ------------------------------------------------------------------ tools
    @tool(timeout=None)
    def bash(self, command: str) -> str:
        """Run a shell command in the working directory and return its output and exit code.

        Args:
            command: The command line, run with `bash -c` (a fresh shell each call), e.g. `grep -rn "def merge" .`.
        """
        self.calls["bash"] += 1
        try:
            result = self.run_command(command)
        except SandboxFileNotFoundError:
            raise self._no_workdir() from None
        return result if isinstance(result, str) else self.describe_command(result)

    @tool(timeout=None)
    def view(self, path: str, start_line: int = 1, end_line: int = -1) -> str:
        """Show a file with line numbers, or list a directory (two levels, hidden files omitted).

        Args:
            path: File or directory, relative to the working directory.
            start_line: First line to show (1-based).
            end_line: Last line to show; -1 for the end of the file.
        """
        self.calls["view"] += 1
        full = self._path(path)
        _, kind = self._output(
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
            _, listing = self._output(
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

    @tool(timeout=None)
    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        """Replace the one occurrence of `old_str` in a file with `new_str`.

        Args:
            path: The file, relative to the working directory.
            old_str: Text to replace; must occur exactly once (include surrounding lines to make it unique).
            new_str: The replacement text.
        """
        self.calls["str_replace"] += 1
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

    @tool(timeout=None)
    def create(self, path: str, file_text: str) -> str:
        """Create a new file with the given content (fails if the file exists; edit it with str_replace).

        Args:
            path: The new file, relative to the working directory.
            file_text: The whole content of the file.
        """
        self.calls["create"] += 1
        full = self._path(path)
        code, _ = self._output(["test", "-e", full])
        if code == 0:
            raise FileExistsError(f"{path} exists; change it with str_replace")
        self._write(full, file_text)
        return f"Created {path} ({len(file_text.splitlines())} lines)."

    @tool(timeout=None)
    def read_file(self, path: str) -> str:
        """Return the text of a file.

        Args:
            path: The file's path (relative to the working directory, or absolute).
        """
        self.calls["read_file"] += 1
        return self._cap(self._read(self._path(path)))

    @tool(timeout=None)
    def write_file(self, path: str, content: str) -> str:
        """Create or replace a file (parent directories are created).

        Args:
            path: The file's path (relative to the working directory, or absolute).
            content: The complete new text of the file.
        """
        self.calls["write_file"] += 1
        self._write(self._path(path), content)
        return f"wrote {len(content.encode())} bytes to {path}"

    @tool(timeout=None)
    def submit(self) -> str:
        """Say that the work is done; it is checked and the episode ends."""
        self.calls["submit"] += 1
        self._host.submitted = True
        return "Submitted."
