"""The environment contract: :class:`Env` and :class:`BaseTextEnv`.

An episode of a text env goes like this::

    env = skyrl_gym.make("my_env", env_config=cfg, extras=row)   # one object per episode
    env.setup()                              # optional hook: slow preparation (a container)
    messages, info = env.init(prompt)        # the first messages the model sees
    while True:
        out = env.step(model_turn_text)      # BaseTextEnvStepOutput
        if out.done:
            break
        # out.observations are appended to the conversation, the model speaks again
    bonus = env.grade()                      # optional hook: a slow verifier, added to the reward
    metrics = env.get_metrics()
    env.close()

Invariants (``skyrl_gym.check_env`` asserts them):

* ``step`` never raises because of what the model wrote. Malformed actions, unknown tools and
  tool failures come back as observation messages with ``metadata["error"]`` set; the episode
  goes on. ``step`` raises only for the env author's bugs and for infrastructure failures.
* ``done`` is True at the latest when ``turns`` reaches ``max_turns``. ``step`` after ``done``
  is undefined (the runtime never calls it).
* ``reward`` is a finite float. Envs that score only at the end return 0.0 on earlier turns.
* ``close()`` can be called any number of times; envs are context managers.
* Limits (turns, tool deadlines, sandbox resources) come from ``env_config``/``extras``, never
  from the model's text.
* ``setup()`` and ``grade()`` are optional hooks for slow work (starting a sandbox, running a
  test suite). The rollout engine runs them in their own pipeline stages, outside the slots
  where the policy generates, so a slow container start or verifier never leaves the policy
  idle. Envs that do not override them cost nothing. A driver that does not know the hooks
  (an older runtime) never calls them, so an env that needs ``setup`` also calls
  ``self.setup()`` from ``init`` (``setup`` is idempotent), and an env whose reward comes from
  ``grade`` is driven only by runtimes that call it (``skyrl_agent``'s loop and engine do).

This module is compatible with the published skyrl-gym API: an env written against it
(``__init__(self, env_config, extras)``, ``init``, ``step``, ``close``, ``get_metrics``,
``aggregate_metrics``, ``init_tool_groups``, ``_execute_tool``) runs unchanged. Differences: no
mutable default arguments, a real default for ``postprocessed_action``, and ``step`` may return
either our dataclass or a published-style dict.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from skyrl_gym._aggregate import default_aggregate_metrics
from skyrl_gym.types import BaseTextEnvStepOutput, ConversationType, EnvExample

if TYPE_CHECKING:
    from skyrl_gym.tools.core import ToolGroup
    from skyrl_gym.tools.types import ToolCallParser, ToolResult

__all__ = ["Env", "BaseTextEnv", "BaseTextEnvStepOutput"]

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")


class Env(Generic[ObsType, ActType]):
    """The minimal env: ``init``, ``step``, ``close``. Text envs subclass :class:`BaseTextEnv`."""

    spec: Any = None
    """Set by ``skyrl_gym.make`` to the ``skyrl_gym.registration.EnvSpec`` the env was built from
    (typed ``Any`` here: the registry imports this module, not the other way round)."""

    def init(self, *args: Any, **kwargs: Any) -> tuple[ObsType, dict[str, Any]]:
        """Start the episode; return the first observation and an info dict."""
        raise NotImplementedError

    def step(self, action: ActType) -> Any:
        """Apply one action and return the step output."""
        raise NotImplementedError

    def close(self) -> None:
        """Release resources. Idempotent."""

    def __enter__(self) -> Env[ObsType, ActType]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __str__(self) -> str:
        name = type(self).__name__
        return f"<{name}<{self.spec.id}>>" if self.spec is not None else f"<{name} instance>"


class BaseTextEnv(Env[ConversationType, str]):
    """Base class of multi-turn text envs: messages in, a string action out.

    Subclasses implement ``step`` (and usually ``__init__`` and ``init``). ``__init__`` takes
    ``env_config`` (an env-wide config: a dict or an attribute-style config such as OmegaConf's
    ``DictConfig``) and ``extras`` (the dataset row's fields, e.g. ``reward_spec``).
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        self.env_config = env_config
        self.extras: Mapping[str, Any] = extras if extras is not None else {}
        self.turns = 0
        self.max_turns = 1
        self.tool_groups: list[ToolGroup] = []
        self.tool_to_toolgroup: dict[str, str] = {}
        self.rng = random.Random()

    # ----------------------------------------------------------------- episode
    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start the episode. Returns the messages the model sees first and an info dict."""
        return prompt, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Apply the model's turn ``action`` and return observations, reward and ``done``."""
        raise NotImplementedError

    def setup(self) -> None:
        """Optional hook: slow preparation before ``init`` (start a container, build an image,
        clone a repository). Called once, in a worker thread, before the episode takes a
        generation slot. Must be idempotent (``init`` may call it again for drivers that do not
        know the hook). Raising is an infrastructure failure: the episode is masked."""

    def grade(self) -> float | None:
        """Optional hook: score the finished episode (run a verifier or a test suite).

        Called once after the last turn (``done``, or the runtime's turn or context budget ran
        out), in a worker thread, after the episode has left its generation slot. The returned
        reward is added to the last turn's reward; ``None`` adds nothing. Raising (or passing
        the runtime's grading deadline) is an infrastructure failure: the episode is masked,
        never scored 0."""
        return None

    def seed(self, seed: int | None) -> None:
        """Seed ``self.rng``; envs that draw random numbers use it so runs can be repeated."""
        self.rng = random.Random(seed)

    # ----------------------------------------------------------------- tools
    def init_tool_groups(self, tool_groups: Sequence[ToolGroup] | None = None) -> None:
        """Attach tool groups; tool names must be unique across groups."""
        self.tool_groups = list(tool_groups or [])
        mapping: dict[str, str] = {}
        for group in self.tool_groups:
            for tool_name, group_name in group.get_tool_to_group_mapping().items():
                if tool_name in mapping:
                    from skyrl_gym.errors import ConfigError

                    raise ConfigError(
                        f"tool {tool_name!r} is provided by both {mapping[tool_name]!r} and "
                        f"{group_name!r}; rename one of them"
                    )
                mapping[tool_name] = group_name
        self.tool_to_toolgroup = mapping

    def _execute_tool(self, tool_group_name: str, tool_name: str, tool_input: Any) -> Any:
        """Run one tool as the published API does: ``tool_input`` is a list of positional args
        (a dict is passed as keyword arguments). Errors propagate; ``tool_specs``/``call_tools``
        of :mod:`skyrl_gym.tools` offer the validated, never-raising path for model calls."""
        for group in self.tool_groups:
            if group.get_name() == tool_group_name:
                if isinstance(tool_input, Mapping):
                    return group.execute_tool(tool_name, **tool_input)
                if isinstance(tool_input, (list, tuple)):
                    return group.execute_tool(tool_name, *tool_input)
                return group.execute_tool(tool_name, tool_input)
        from skyrl_gym.errors import ToolNotFoundError, did_you_mean

        names = [g.get_name() for g in self.tool_groups]
        raise ToolNotFoundError(
            f"no tool group named {tool_group_name!r}; attached: {names}."
            + did_you_mean(tool_group_name, names)
        )

    def tool_specs(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools=`` list for every attached tool."""
        return [spec for group in self.tool_groups for spec in group.tool_specs()]

    def call_tools(
        self,
        action: str | Mapping[str, Any],
        parser: str | ToolCallParser = "hermes",
        *,
        timeout: float | None = 30.0,
    ) -> list[ToolResult]:
        """Parse the model's turn with ``parser`` and run its calls against ``self.tool_groups``.

        Never raises because of what the model wrote: bad JSON, unknown tools, bad arguments,
        failing or slow tools come back as results with ``error`` set and a message for the model.
        ``timeout`` is the deadline (seconds) of each call for tools that set none. Turn the
        results into observations with ``[r.to_message() for r in results]``; an empty list means
        the turn held no tool call. Tools can take a ``ToolContext`` parameter; its ``env`` is self."""
        from skyrl_gym.tools import ToolContext, call_tools

        return call_tools(self.tool_groups, action, parser, context=ToolContext(env=self), timeout=timeout)

    # ----------------------------------------------------------------- metrics
    def get_metrics(self) -> dict[str, Any]:
        """Per-episode metrics (numbers or bools), read once after the episode."""
        return {}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        """Combine ``get_metrics()`` of many episodes; the default averages numeric fields."""
        return default_aggregate_metrics(metrics)

    # ----------------------------------------------------------------- data
    bundled_stratify_by: ClassVar[str | None] = None
    """A field of :meth:`bundled_rows` whose kinds ``skyrl train`` spreads evenly through training
    by default (``--stratify-by auto``), e.g. the calculator's question ``shape``; None: a plain
    shuffle."""

    @classmethod
    def bundled_rows(cls, split: str = "train", n: int = 0, seed: int = 0) -> list[dict[str, Any]] | None:
        """The dataset rows this env ships with, in the published columns (``prompt``,
        ``env_class``, ``reward_spec``, the env's extras), or None when it ships none.

        ``split`` is ``"train"`` or ``"test"`` (held out: disjoint from ``train``); ``n`` > 0
        caps the count (envs that generate rows make exactly ``n``, seeded by ``seed``); 0 gives
        the env's default set. ``skyrl train`` reads its data here when no ``--data`` is given.
        Override in envs with bundled data."""
        return None

    # ----------------------------------------------------------------- checking
    @classmethod
    def example(cls) -> EnvExample:
        """A ready episode set-up (config, extras, prompt) for ``check_env`` and demos.

        Override in envs that need data to be constructed."""
        return EnvExample()

    def close(self) -> None:
        """Release resources (sandboxes, connections). Idempotent."""
