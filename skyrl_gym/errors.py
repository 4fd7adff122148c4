"""The project's error types.

One root, :class:`SkyRLError`. Each subclass also inherits the builtin it stands for, so code
that catches ``ValueError`` or ``KeyError`` keeps working, and each message says how to fix the
problem. Every error pickles (it crosses process and Ray boundaries).

These are for *developer* mistakes and infrastructure failures. A *model's* mistake (bad JSON,
an unknown tool, a SQL error) is never raised out of ``env.step``: it becomes an observation.
An infrastructure failure is an :class:`InfrastructureError`: it passes through the tool
executor and out of ``env.step``, and the runtime masks the episode (never a reward of 0).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "SkyRLError",
    "ConfigError",
    "RegistrationError",
    "EnvNotFoundError",
    "MissingDependencyError",
    "ToolDefinitionError",
    "ToolNotFoundError",
    "SandboxError",
    "SandboxTimeoutError",
    "EnvContractError",
    "InfrastructureError",
    "did_you_mean",
]


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ``" Did you mean 'x'?"`` suffix for the closest match among ``choices``, or ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


class SkyRLError(Exception):
    """Root of every error this project raises on purpose."""

    def __reduce__(self):  # noqa: ANN204 - pickle support for subclasses with extra fields
        return (self.__class__, self.args)


class ConfigError(SkyRLError, ValueError):
    """A configuration value is missing, of the wrong type or out of range."""


class RegistrationError(SkyRLError, ValueError):
    """An environment id was registered twice, or an entry point is malformed."""


class EnvNotFoundError(ConfigError, KeyError):
    """No environment is registered under the requested id (a :class:`ConfigError`: the id the
    user gave, on the command line or in a dataset row, names no env)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class MissingDependencyError(SkyRLError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, package: str, extra: str, purpose: str = "") -> None:
        self.package, self.extra, self.purpose = package, extra, purpose
        why = f" for {purpose}" if purpose else ""
        super().__init__(
            f"{package!r} is needed{why} but is not installed: "
            f"install the {extra!r} extra: pip install 'skyrl-stack[{extra}]'"
        )

    def __reduce__(self):  # noqa: ANN204
        return (self.__class__, (self.package, self.extra, self.purpose))


class ToolDefinitionError(SkyRLError, TypeError):
    """A ``@tool`` function cannot be turned into a tool (raised at decoration time)."""


class ToolNotFoundError(SkyRLError, ValueError):
    """A tool name that no tool group provides was asked for by code (not by a model)."""


class EnvContractError(SkyRLError, AssertionError):
    """An environment breaks the ``BaseTextEnv`` contract (raised by ``check_env``)."""


class InfrastructureError(SkyRLError, RuntimeError):
    """Something the episode depends on failed, not the model: the Docker daemon or a sandbox, a
    task's verifier, a retrieval server, a judge or a policy server (after retries where they
    apply).

    The marker of the project's rule "a model's mistake is an observation; an infrastructure
    failure masks the episode". The tool executor re-raises these instead of turning them into
    a ``tool_error`` observation, so they leave ``env.step``; the runtime then records the
    episode as failed and masks it, never scoring it 0. No side channel is needed: a tool just
    lets the error raise. Subclass it for a new kind of infrastructure failure; raise anything
    else for what the model can fix (the executor shows that to the model)."""


class EpisodesFailedError(SkyRLError, RuntimeError):
    """Every episode of a batch failed before it could be scored (all masked): a training run
    stops with this instead of going on with nothing to train on or evaluate. Its message names
    the most common failure, which usually says what to fix (an env that cannot be built, a
    server that is not running). Failures that hit only some episodes stay masked."""


class SandboxError(InfrastructureError):
    """A sandbox could not be created, used or cleaned up (an infrastructure failure).

    The sandbox's answers about a path (:class:`~skyrl_gym.sandbox.SandboxPathError`: no such
    file, not a regular file, too large, a write refused) are subclasses too: a tool that got
    the path from the model turns them into the model's error (as
    :class:`~skyrl_gym.sandbox.TerminalTools` does); uncaught, they mask the episode."""


class SandboxTimeoutError(SandboxError, TimeoutError):
    """Creating or reaching a sandbox took longer than its deadline."""


def require(module: str, extra: str, purpose: str = "") -> object:
    """Import ``module`` or raise :class:`MissingDependencyError` naming ``extra``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(module.split(".")[0], extra, purpose) from exc
