"""Data types of the ``rlm`` envs: the env config and what one REPL cell gave back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from skyrl_gym.errors import ConfigError
from skyrl_gym.sandbox.types import LocalIsolation

__all__ = ["RLMConfig", "REPLResult", "TurnPrompts", "ErrorKind"]

#: Which per-turn prompt follows each observation, see :attr:`RLMConfig.turn_prompts`.
TurnPrompts = Literal["short", "full", "none"]

#: Why a cell did not simply run: the model's code raised, ran past its deadline, or ended the
#: REPL process (a crash, ``os._exit``, a resource limit); ``protocol``: the process sent
#: something that is not a well-formed answer (the worker is replaced, as after a crash).
ErrorKind = Literal["exception", "timeout", "crashed", "protocol"]


@dataclass(frozen=True)
class RLMConfig:
    """Settings of the ``rlm`` envs (from ``env_config``). A row's ``extras`` may set
    ``max_turns`` and ``repl_timeout`` (the published keys), which win over the fields here.
    Never from the model."""

    max_turns: int = 10
    """Turns before the episode ends without an answer (reward 0), when ``extras`` set none."""
    repl_timeout_s: float = 180.0
    """Wall-clock deadline of one REPL cell, when ``extras["repl_timeout"]`` is not set. Past
    it the REPL process is killed and a fresh one started (its variables are lost, and the
    observation says so)."""
    turn_prompts: TurnPrompts = "short"
    """The reminder after each observation. ``"short"``: the published per-turn prompt without
    the quoted question (the first prompt, which quotes it, stays in the conversation);
    ``"full"``: the published prompt with the question every turn (a copy per turn piles up,
    since our runtime never removes a message); ``"none"``: only the first prompt."""
    max_output_chars: int = 20_000
    """The REPL output of one cell is cut to this many characters (published: 20,000); the
    worker keeps no more than this of each of stdout and stderr, and counts the rest."""
    memory_mb: int = 2048
    """Address-space limit of the REPL process (the context lives in it)."""
    pids: int = 64
    """Most processes and threads of the REPL at once (enforced when it runs as its own uid)."""
    isolation: LocalIsolation = LocalIsolation.AUTO
    """How the REPL process is isolated: ``auto`` (bubblewrap where it works), ``bwrap``,
    ``none`` (only limits, own session and, as root, own uid), see ``LocalIsolation``."""
    python: str = "python3"
    """Interpreter of the REPL inside the sandbox (it needs the standard library only)."""
    startup_timeout_s: float = 30.0
    """Deadline for a REPL process to start and load the context."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "isolation", LocalIsolation(self.isolation))
        if not isinstance(self.max_turns, int) or isinstance(self.max_turns, bool) or self.max_turns < 1:
            raise ConfigError(f"RLMConfig.max_turns must be an int >= 1, got {self.max_turns!r}")
        for name in ("repl_timeout_s", "startup_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"RLMConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.turn_prompts not in ("short", "full", "none"):
            raise ConfigError(f"unknown turn_prompts {self.turn_prompts!r}; use 'short', 'full' or 'none'")
        if self.max_output_chars < 100:
            raise ConfigError(f"RLMConfig.max_output_chars must be >= 100, got {self.max_output_chars}")
        if self.memory_mb < 64:
            raise ConfigError(f"RLMConfig.memory_mb must be >= 64, got {self.memory_mb}")
        if self.pids < 4:
            raise ConfigError(f"RLMConfig.pids must be >= 4 (the REPL uses threads), got {self.pids}")


@dataclass(frozen=True)
class REPLResult:
    """What one REPL cell gave back. A model's mistake is data here, never an exception."""

    stdout: str
    """What the cell printed (with the output of its child processes after it), at most
    ``max_output_chars`` of it."""
    stderr: str
    """What it wrote to stderr, then the traceback of an exception it raised, or the notice of
    a timeout or of the REPL process ending (as the published REPL puts them in stderr too)."""
    variables: tuple[str, ...] = ()
    """Names of the REPL's variables whose values are ``str``, ``int``, ``float``, ``bool``,
    ``list``, ``dict`` or ``tuple`` (``context`` among them), after the cell."""
    final_answer: str | None = None
    """Set when the cell called ``FINAL_VAR`` (the value as text)."""
    dropped_chars: int = 0
    """Characters of output beyond what was kept."""
    error_kind: ErrorKind | None = None
    """Why the cell did not simply run; None when it did."""
    restarted: bool = False
    """The REPL process was replaced during this cell: every variable but the context and the
    tools was lost."""
