"""Every registered text env as a real ``gymnasium.Env``.

``gymnasium.make("skyrl/<id>", env_config=..., extras=..., prompt=...)`` gives an env whose
observations and actions are :class:`TextSpace` strings, with ``reset``/``step`` following
Gymnasium's API, so Gymnasium's checker and wrappers apply. Gymnasium only sees these ids after
``skyrl_gym`` was imported (``gymnasium.make("skyrl_gym:skyrl/<id>")`` imports it for you).

* Each ``reset`` builds a fresh text env (text envs are one object per episode) and closes the
  previous one. With no ``env_config``/``extras``/``prompt`` the env class's ``example()`` is used.
* The observation is the text of the new messages, joined by blank lines; ``info["messages"]``
  holds the messages themselves.
* ``terminated`` means the task ended; ``truncated`` means a limit ended it: the step output's
  ``truncated`` when the env sets it, else ``turns >= max_turns`` for multi-turn envs (a
  single-turn env ending is termination). The bridge also truncates an env that reaches
  ``max_turns`` without saying ``done``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium
from gymnasium import spaces

from skyrl_gym.registration import GYM_NAMESPACE, make, register_gymnasium_id, spec
from skyrl_gym.types import ConversationType, as_step_output

__all__ = ["TextSpace", "GymnasiumTextEnv", "GYM_NAMESPACE", "register_gymnasium_id"]

MAX_TEXT = 1 << 20
_SAMPLE_CHARSET = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 <>/{}":,._-\n'


class TextSpace(spaces.Text):
    """A ``Text`` space that contains any Unicode string up to ``max_length`` characters.

    Gymnasium's ``Text`` only contains strings over its sampling charset; model output and env
    observations can hold any character, so membership checks only type and length. Samples are
    drawn from a small charset that includes tool-call punctuation.
    """

    def __init__(self, max_length: int = MAX_TEXT, *, seed: int | None = None) -> None:
        super().__init__(max_length=max_length, min_length=0, charset=_SAMPLE_CHARSET, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            length = int(self.np_random.integers(0, min(self.max_length, 256) + 1))
            chars = self.np_random.choice(list(_SAMPLE_CHARSET), size=length)
            return "".join(chars)
        return super().sample(mask=mask, probability=probability)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"


def render_messages(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of ``messages`` joined by blank lines (non-string content is skipped)."""
    parts = [m.get("content") for m in messages]
    return "\n\n".join(p for p in parts if isinstance(p, str))


class GymnasiumTextEnv(gymnasium.Env):
    """A ``gymnasium.Env`` around a registered ``skyrl_gym`` text env."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        env_id: str,
        env_config: Any = None,
        extras: Mapping[str, Any] | None = None,
        prompt: ConversationType | None = None,
        render_mode: str | None = None,
        max_length: int = MAX_TEXT,
    ) -> None:
        self.env_id = env_id
        self._text_spec = spec(env_id)
        if env_config is None and extras is None and prompt is None:
            example = getattr(self._text_spec.load(), "example", None)
            if example is not None:
                ex = example()
                env_config, extras, prompt = dict(ex.env_config), dict(ex.extras), list(ex.prompt)
        self.env_config = env_config
        self.extras = extras
        self.prompt = list(prompt) if prompt is not None else [{"role": "user", "content": ""}]
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        self.render_mode = render_mode
        self.observation_space = TextSpace(max_length)
        self.action_space = TextSpace(max_length)
        self.text_env: Any = None
        self._transcript: list[str] = []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if self.text_env is not None:
            self.text_env.close()
        self.text_env = make(self.env_id, env_config=self.env_config, extras=self.extras)
        if hasattr(self.text_env, "seed"):
            self.text_env.seed(int(self.np_random.integers(0, 2**31 - 1)))
        messages, info = self.text_env.init(list(self.prompt))
        obs = render_messages(messages)[: self.observation_space.max_length]
        self._transcript = [obs]
        return obs, {**dict(info or {}), "messages": messages}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.text_env is None:
            raise gymnasium.error.ResetNeeded("call reset() before step()")
        out = as_step_output(self.text_env.step(action))
        env = self.text_env
        at_limit = env.turns >= env.max_turns
        if out.truncated is not None:
            truncated = bool(out.truncated)
        else:
            # Published envs do not say why they ended. A multi-turn env that ends on its turn
            # limit was cut short; a single-turn env (max_turns == 1) ending is the task ending.
            truncated = at_limit and env.max_turns > 1
        done = bool(out.done) or at_limit  # the bridge enforces the turn limit itself
        truncated = done and (truncated or not out.done)
        terminated = done and not truncated
        obs = render_messages(out.observations)[: self.observation_space.max_length]
        self._transcript += [action, obs]
        info = {"messages": out.observations, "metadata": out.metadata, "turns": env.turns}
        return obs, float(out.reward), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return "\n".join(self._transcript)
        return None

    def close(self) -> None:
        if self.text_env is not None:
            self.text_env.close()
            self.text_env = None
        super().close()
