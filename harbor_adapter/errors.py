"""Errors of the Harbor adapter. Each is a :class:`~skyrl_gym.errors.SkyRLError` and also the
builtin it stands for, and says how to fix the problem.

A broken *task* (a missing file, bad TOML, an unknown key) is a developer's mistake and raises
at load time. A *trial* that cannot produce a trustworthy reward (the image does not build, the
container does not start, the verifier writes no reward, a NaN) raises :class:`TrialError`
subclasses, which are :class:`~skyrl_gym.errors.InfrastructureError`: the runtime records them
and masks the episode, never turning them into reward 0.
"""

from __future__ import annotations

from skyrl_gym.errors import ConfigError, InfrastructureError, SandboxError

__all__ = [
    "HarborTaskError",
    "TaskFileMissingError",
    "TaskConfigError",
    "UnsupportedTaskError",
    "TrialError",
    "ImageBuildError",
    "TrialTimeoutError",
    "RewardError",
]


class HarborTaskError(ConfigError):
    """A Harbor task directory is broken (raised when it is loaded)."""


class TaskFileMissingError(HarborTaskError, FileNotFoundError):
    """A file or directory a Harbor task needs does not exist."""


class TaskConfigError(HarborTaskError):
    """``task.toml`` is not valid TOML, has an unknown key, or a value of the wrong type."""


class UnsupportedTaskError(HarborTaskError):
    """The task asks for something this adapter cannot run (GPUs, Windows, a Compose service
    key that would escape the sandbox)."""


class TrialError(InfrastructureError):
    """A trial could not produce a reward that can be trusted (an infrastructure or task failure,
    never the agent's score). An :class:`~skyrl_gym.errors.InfrastructureError`: raised inside a
    tool it passes through the tool executor and out of ``env.step``, and the episode is masked."""


class ImageBuildError(TrialError, SandboxError):
    """The task's image could not be built (or a named image is not there)."""


class TrialTimeoutError(TrialError, TimeoutError):
    """Building the image, starting the container or the verifier ran past its deadline."""


class RewardError(TrialError):
    """The verifier left no usable reward: the file is missing, empty, not a number, NaN or
    infinite. Recorded as an error, never as 0."""
