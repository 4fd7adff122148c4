"""What went wrong in an episode, as a record instead of a string (decision 0032).

A :class:`Failure` is made in one place, :meth:`Failure.of`, from the exception and the stage of
the episode it came from:

========  ==========================================================================
stage     where
========  ==========================================================================
setup     building the env (``skyrl_gym.make`` or the user's factory), ``setup()``, ``init()``
policy    the policy's generation (a server that failed after its retries, an unusable reply)
env       ``env.step`` (an exception that left the tool executor, a call past its deadline, a
          step output that is not one)
grade     the env's ``grade()`` hook (a verifier)
close     ``get_metrics()`` or ``close()``: the episode is complete, so it is not masked
========  ==========================================================================

``kind`` is the exception's class name (``TimeoutError`` for a call past its deadline), and
``retriable`` says whether playing the episode again with the same seed could go otherwise:

* **retriable**: timeouts, lost connections and operating-system errors (``TimeoutError``,
  ``ConnectionError``, ``OSError`` except the file ones), the project's
  :class:`~skyrl_gym.errors.InfrastructureError` (a sandbox, a verifier, a policy server that
  answered 429 or 5xx until its retries ran out);
* **not retriable**: everything else. An exception that escapes ``env.step`` without being an
  ``InfrastructureError`` is an env bug (the tool executor turns a model's mistake into an
  observation and lets only infrastructure failures out), and an import, configuration or
  programming error fails the same way every time; so does a policy server's 4xx.

An exception may decide for itself with a ``retriable`` attribute (``True`` or ``False``).
The engine retries only retriable failures (``RolloutConfig.max_retries``); a failure that is
not retriable and hits every episode of a batch stops a training run with
:class:`~skyrl_gym.errors.EpisodesFailedError`, whose message says how to fix it
(:func:`fix_hint`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from skyrl_gym.errors import InfrastructureError

__all__ = ["Failure", "FailureStage", "count_failures", "failure_key", "fix_hint", "is_retriable"]


class FailureStage(StrEnum):
    """The stage of an episode a failure came from (see the module docstring)."""

    SETUP = "setup"
    POLICY = "policy"
    ENV = "env"
    GRADE = "grade"
    CLOSE = "close"


#: File errors are OSErrors that fail the same way every time.
_DETERMINISTIC_OS_ERRORS = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


@dataclass(frozen=True)
class Failure:
    """One failure of an episode: where, what kind, the message, and whether a retry may help."""

    stage: FailureStage
    """The episode's stage (:class:`FailureStage`)."""
    kind: str
    """The exception's class name (``TimeoutError`` for a deadline of one call)."""
    message: str
    """What happened, with where (``... (in env.step (turn 2))``)."""
    retriable: bool
    """Whether the same episode, played again with the same seed, may not fail this way."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "stage", FailureStage(self.stage))

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" if self.message else self.kind

    @classmethod
    def of(cls, exc: BaseException, stage: FailureStage | str, where: str = "") -> Failure:
        """The failure ``exc`` raised in ``stage`` (``where`` names the call, e.g. ``env.step``)."""
        message = str(exc)
        if where:
            message = f"{message} (in {where})" if message else f"(in {where})"
        return cls(FailureStage(stage), type(exc).__name__, message, is_retriable(exc))

    @classmethod
    def timeout(cls, stage: FailureStage | str, message: str) -> Failure:
        """A call that ran past its own deadline (retriable: the next try may be faster)."""
        return cls(FailureStage(stage), "TimeoutError", message, True)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "stage": str(self.stage),
            "kind": self.kind,
            "message": self.message,
            "retriable": self.retriable,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Failure:
        """Inverse of :meth:`to_dict`; a missing or unknown key raises ``ValueError``."""
        keys = {"stage", "kind", "message", "retriable"}
        if set(d) != keys:
            raise ValueError(f"a failure has exactly the keys {sorted(keys)}, got {sorted(d)}")
        return cls(FailureStage(d["stage"]), str(d["kind"]), str(d["message"]), bool(d["retriable"]))


def is_retriable(exc: BaseException) -> bool:
    """Whether an episode that raised ``exc`` is worth playing again (module docstring)."""
    own = getattr(exc, "retriable", None)
    if isinstance(own, bool):
        return own
    status = getattr(exc, "status", None)  # a policy server's answer (PolicyHTTPError)
    if isinstance(exc, InfrastructureError) and isinstance(status, int):
        return status == 429 or status >= 500
    if isinstance(exc, _DETERMINISTIC_OS_ERRORS):
        return False
    return isinstance(exc, (InfrastructureError, TimeoutError, ConnectionError, OSError))


def failure_key(episode: Any) -> str:
    """``stage/kind`` of an episode's (a trajectory's) failure; from its error text
    (``unknown/Kind``) for an episode recorded before failures were records."""
    failure = getattr(episode, "failure", None)
    if failure is not None:
        return f"{failure.stage}/{failure.kind}"
    kind = (getattr(episode, "error", None) or "").split(":", 1)[0].strip()
    return f"unknown/{kind if kind.isidentifier() else 'error'}"


def count_failures(episodes: Iterable[Any]) -> Counter[str]:
    """How many of ``episodes`` failed, by :func:`failure_key` (``stage/kind``); episodes without
    a failure are not counted."""
    return Counter(
        failure_key(e)
        for e in episodes
        if getattr(e, "failure", None) is not None or getattr(e, "error", None)
    )


#: What to do about the failures that fail every episode, by kind (first match wins).
_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("ModuleNotFoundError", "ImportError", "MissingDependencyError"),
        "a module the env needs could not be imported: install it (or the project's extra the message "
        "names), or fix --import / --env so they name a module that imports from the current directory",
    ),
    (
        ("RegistrationError", "EnvNotFoundError", "ConfigError"),
        "the env could not be built from its id and env_config: check --env, --env-config and the "
        "rows' env_class (`skyrl envs` lists the registered ids)",
    ),
    (
        ("TimeoutError",),
        "every episode ran past a deadline: make the env faster or raise the deadline the message "
        "names (RolloutConfig's env_setup_timeout_s, env_step_timeout_s or env_grade_timeout_s)",
    ),
    (
        ("ConnectionError", "ConnectionRefusedError", "PolicyError", "PolicyHTTPError"),
        "a server the episodes need did not answer: start it (or point the run at the right address) "
        "and run again",
    ),
)


def fix_hint(failure: Failure) -> str:
    """One sentence on what to do about ``failure`` when it fails every episode."""
    for kinds, hint in _HINTS:
        if failure.kind in kinds:
            return hint
    where = {
        FailureStage.SETUP: "while the env was built or initialised",
        FailureStage.POLICY: "in the policy",
        FailureStage.ENV: "inside env.step",
        FailureStage.GRADE: "in the env's grade() hook",
        FailureStage.CLOSE: "while the env was closed",
    }[failure.stage]
    if failure.retriable:
        return (
            f"an infrastructure failure {where} hit every episode: check the service it names and run again"
        )
    return (
        f"the same error {where} hit every episode, so it is a bug, not bad luck: "
        "skyrl_gym.check_env(lambda: skyrl_gym.make(ENV_ID)) runs the env alone and shows the traceback"
    )
