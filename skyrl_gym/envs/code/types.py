"""Data types of the code envs: test cases, per-test results, the env config."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from skyrl_gym.errors import ConfigError

__all__ = ["TestKind", "FailKind", "CodeTest", "TestResult", "GradeReport", "CodeEnvConfig", "CodeProblem"]


class TestKind(StrEnum):
    """How a hidden test drives the program (LiveCodeBench's ``testtype``)."""

    __test__ = False  # not a pytest class

    STDIN = "stdin"
    """Run the program, feed ``input`` on stdin, compare its stdout with ``output`` line by line."""
    FUNCTIONAL = "functional"
    """Call ``func_name`` with the JSON arguments of ``input`` (one per line), compare the
    return value with the JSON value ``output``."""


class FailKind(StrEnum):
    """Why a test did not pass."""

    WRONG_ANSWER = "wrong_answer"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    OUTPUT_LIMIT = "output_limit"
    NO_FUNCTION = "no_function"
    BAD_RETURN = "bad_return"
    NOT_RUN = "not_run"
    """Skipped: an earlier test failed (stop at first failure) or the overall deadline ran out."""


@dataclass(frozen=True)
class CodeTest:
    """One hidden test. It stays on the host: only ``input`` (or the arguments) enters the sandbox."""

    __test__ = False  # not a pytest class

    kind: TestKind
    """stdin/stdout or a function call."""
    input: str
    """stdin text, or the call's arguments as JSON values, one per line (LiveCodeBench style)."""
    output: str
    """Expected stdout, or the expected return value as JSON."""
    func_name: str | None = None
    """Function (or ``Solution`` method) to call; required for functional tests."""


@dataclass(frozen=True)
class TestResult:
    """What one test gave. Goes into step metadata (output is cut short)."""

    __test__ = False

    index: int
    """Position of the test in the row's list."""
    kind: TestKind
    """The test's kind."""
    passed: bool
    """Output (or return value) matched."""
    timed_out: bool = False
    """The program ran past the per-test deadline."""
    error: FailKind | None = None
    """Why it failed; None when it passed."""
    output: str = ""
    """The start of what the program printed (or returned), at most a few hundred characters."""
    stderr: str = ""
    """The end of the program's stderr (a traceback), at most a few hundred characters."""

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form for step metadata."""
        return {
            "index": self.index,
            "kind": self.kind.value,
            "passed": self.passed,
            "timed_out": self.timed_out,
            "error": None if self.error is None else self.error.value,
            "output": self.output,
            "stderr": self.stderr,
        }


@dataclass(frozen=True)
class GradeReport:
    """The outcome of grading one program against all of a problem's tests."""

    results: tuple[TestResult, ...]
    """One result per test, in order (tests not run are marked ``not_run``)."""
    compile_error: str | None = None
    """The syntax error message when the program does not compile (no test ran)."""
    overall_timeout: bool = False
    """The overall deadline ran out before every test ran."""

    @property
    def n_tests(self) -> int:
        """How many tests the problem has."""
        return len(self.results)

    @property
    def n_passed(self) -> int:
        """How many tests passed."""
        return sum(r.passed for r in self.results)

    @property
    def all_passed(self) -> bool:
        """Every test passed (and there was at least one)."""
        return bool(self.results) and self.n_passed == self.n_tests

    @property
    def timed_out(self) -> bool:
        """Some test ran past its deadline, or the overall deadline ran out."""
        return self.overall_timeout or any(r.timed_out for r in self.results)


@dataclass(frozen=True)
class CodeEnvConfig:
    """Settings of the ``code`` and ``code_multi_turn`` envs (from ``env_config``; a row's
    extras may set ``test_timeout_s``). Never from the model."""

    sandbox: Literal["local", "docker"] = "local"
    """Where programs run: local processes (bubblewrap where it works) or a strict Docker
    container of the ``skyrl-sandbox/python`` image."""
    test_timeout_s: float = 6.0
    """Wall-clock deadline of one test run."""
    total_timeout_s: float | None = None
    """Deadline of grading as a whole; ``None``: ``(test_timeout_s + 1) * n_tests + 5``."""
    stop_at_first_failure: bool = True
    """Skip the remaining tests once one fails (the reward is 0 either way)."""
    memory_mb: int = 1024
    """Memory limit of a run (local: address space; Docker: cgroup memory)."""
    pids: int = 64
    """Most processes at once (a fork bomb stops here)."""
    output_bytes: int = 256 * 1024
    """Most bytes kept of a run's stdout; more is cut and the test fails with ``output_limit``."""
    max_turns: int = 4
    """``code_multi_turn`` only: turns before the episode ends without an answer."""
    tool_timeout_s: float = 10.0
    """``code_multi_turn`` only: deadline of one ``python`` tool call."""
    image: str = "skyrl-sandbox/python:latest"
    """Docker image (``sandbox="docker"`` only); ``skyrl sandbox build-images`` builds it offline."""
    python: str = "python3"
    """Interpreter inside the sandbox."""
    pool_size: int = 0
    """Docker only: lease containers from a process-wide warm pool of this size, shared by code
    envs with the same image and limits (reset between episodes: processes killed, files
    removed); 0 starts a fresh container per episode."""

    def __post_init__(self) -> None:
        if self.sandbox not in ("local", "docker"):
            raise ConfigError(f"unknown sandbox {self.sandbox!r}; use 'local' or 'docker'")
        for name in ("test_timeout_s", "tool_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"CodeEnvConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.total_timeout_s is not None and not self.total_timeout_s > 0:
            raise ConfigError(
                f"CodeEnvConfig.total_timeout_s must be > 0 or None, got {self.total_timeout_s!r}"
            )
        if self.max_turns < 1:
            raise ConfigError(f"CodeEnvConfig.max_turns must be >= 1, got {self.max_turns}")
        if self.pool_size < 0 or (self.pool_size and self.sandbox != "docker"):
            raise ConfigError(
                f"CodeEnvConfig.pool_size={self.pool_size} needs sandbox='docker' and must be >= 0"
            )
        if self.memory_mb < 64:
            raise ConfigError(f"CodeEnvConfig.memory_mb must be >= 64, got {self.memory_mb}")


@dataclass(frozen=True)
class CodeProblem:
    """One bundled problem: statement, hidden tests and a reference solution (for tests only)."""

    id: str
    """Stable id, e.g. ``"sum-of-evens"``."""
    statement: str
    """What the model reads."""
    tests: tuple[CodeTest, ...]
    """Hidden tests."""
    reference: str
    """A program that passes every test (never shown to the model)."""
    starter: str = ""
    """For functional problems: the signature to complete."""
    split: Literal["train", "test"] = "train"
    """Which split the problem belongs to."""
    tags: tuple[str, ...] = field(default_factory=tuple)
    """Free-form topic tags."""
