"""Data types of the env SDK: messages, step outputs, examples for the checker.

Everything an env hands to the runtime is defined here, so the contract is readable in one place.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "MessageType",
    "ConversationType",
    "BaseTextEnvStepOutput",
    "EnvExample",
    "as_step_output",
]

#: One OpenAI-style chat message: ``{"role": "user", "content": "..."}`` (a ``tool`` message may
#: also carry ``tool_call_id`` and ``name``).
MessageType = dict[str, Any]
#: A list of chat messages.
ConversationType = list[MessageType]


@dataclass
class BaseTextEnvStepOutput:
    """What ``BaseTextEnv.step`` returns.

    Compatible with the published skyrl-gym ``TypedDict`` of the same name: it is built with
    keyword arguments and also reads like a mapping (``out["reward"]``, ``out.get(...)``), so
    code written against the published API keeps working. A plain dict with the same keys is
    accepted wherever a step output is expected (see :func:`as_step_output`).
    """

    observations: ConversationType
    """New messages for the model (usually one ``user`` or ``tool`` message); may be empty."""
    reward: float
    """Reward for this step. Multi-turn envs may give per-turn rewards or only a final one."""
    done: bool
    """True when the episode is over: the task ended or a limit was reached."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form facts about the step (tool call, error kind, parsed answer...)."""
    postprocessed_action: str | None = None
    """The action as the env understood it, when it differs from what the model wrote (for
    example cut at a stop string). The runtime trains on the sampled tokens either way."""
    truncated: bool | None = None
    """Extension: True when ``done`` came from a limit (turns, time) rather than the task ending.
    ``None`` (the default, and all that published envs give) lets consumers infer it from
    ``turns >= max_turns``."""

    # Mapping-style access, for code written against the published TypedDict.
    def __getitem__(self, key: str) -> Any:
        if key not in _STEP_FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in _STEP_FIELDS:
            raise KeyError(key)
        setattr(self, key, value)

    def __contains__(self, key: object) -> bool:
        return key in _STEP_FIELDS

    def __iter__(self) -> Iterator[str]:
        return iter(_STEP_FIELDS)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in _STEP_FIELDS else default

    def keys(self) -> list[str]:
        return list(_STEP_FIELDS)

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in _STEP_FIELDS]


_STEP_FIELDS = tuple(f.name for f in fields(BaseTextEnvStepOutput))


def as_step_output(out: BaseTextEnvStepOutput | Mapping[str, Any]) -> BaseTextEnvStepOutput:
    """Normalize what an env's ``step`` returned (our dataclass or a published-style dict).

    Raises ``TypeError`` naming the problem when the value cannot be a step output: this is an
    env author's bug, not a model's mistake.
    """
    if isinstance(out, BaseTextEnvStepOutput):
        result = out
    elif isinstance(out, Mapping):
        missing = [k for k in ("observations", "reward", "done") if k not in out]
        if missing:
            raise TypeError(f"step() returned a mapping without {missing}; return BaseTextEnvStepOutput(...)")
        unknown = set(out) - set(_STEP_FIELDS)
        if unknown:
            raise TypeError(f"step() returned unknown keys {sorted(unknown)}; allowed: {list(_STEP_FIELDS)}")
        result = BaseTextEnvStepOutput(**{k: out[k] for k in _STEP_FIELDS if k in out})
        if result.metadata is None:
            result.metadata = {}
    else:
        raise TypeError(f"step() must return BaseTextEnvStepOutput, got {type(out).__name__}")
    if not isinstance(result.observations, list):
        raise TypeError(f"observations must be a list of messages, got {type(result.observations).__name__}")
    try:
        reward = float(result.reward)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"reward must be a number, got {result.reward!r}") from exc
    if math.isnan(reward):
        raise TypeError("reward is NaN; an env must return a finite reward or record an error")
    return result


@dataclass(frozen=True)
class EnvExample:
    """A ready-made episode set-up for an env, used by ``check_env`` and by ``skyrl envs``.

    Envs that need data (a database, a task file) override ``BaseTextEnv.example()`` to return
    one built from bundled data.
    """

    env_config: Mapping[str, Any] = field(default_factory=dict)
    """The ``env_config`` to construct the env with."""
    extras: Mapping[str, Any] = field(default_factory=dict)
    """The ``extras`` (dataset-row fields) to construct the env with."""
    prompt: tuple[MessageType, ...] = ({"role": "user", "content": "Hello"},)
    """The prompt messages passed to ``init``."""
    good_actions: tuple[str, ...] = ()
    """Optional: actions that solve the episode; the checker expects a positive final reward."""
