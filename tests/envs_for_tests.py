"""Small envs used by the core tests (not registered globally)."""

from __future__ import annotations

import re
from typing import Any

from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput, EnvExample


class GuessEnv(BaseTextEnv):
    """Guess a number in up to three turns; the answer goes in <guess>N</guess>."""

    def __init__(self, env_config: Any = None, extras: dict | None = None) -> None:
        super().__init__(env_config, extras)
        self.max_turns = int((extras or {}).get("max_turns", 3))
        self.target = int((extras or {}).get("target", 7))
        self.guesses: list[int] = []

    @classmethod
    def example(cls) -> EnvExample:
        return EnvExample(
            extras={"target": 7, "max_turns": 3},
            prompt=({"role": "user", "content": "Guess a number from 1 to 10 as <guess>N</guess>."},),
            good_actions=("<guess>7</guess>",),
        )

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        m = re.search(r"<guess>\s*(-?\d{1,9})\s*</guess>", action)
        if m is None:
            obs, reward, solved = "Answer with <guess>N</guess>.", 0.0, False
            meta: dict[str, Any] = {"error": "format"}
        else:
            value = int(m.group(1))
            self.guesses.append(value)
            solved = value == self.target
            reward = 1.0 if solved else 0.0
            obs = "Correct." if solved else ("Higher." if value < self.target else "Lower.")
            meta = {"guess": value}
        done = solved or self.turns >= self.max_turns
        truncated = done and not solved
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": obs}],
            reward=reward,
            done=done,
            metadata=meta,
            truncated=truncated,
        )

    def get_metrics(self) -> dict[str, Any]:
        return {
            "guesses": len(self.guesses),
            "solved": bool(self.guesses and self.guesses[-1] == self.target),
        }


class CoinEnv(BaseTextEnv):
    """One turn; reward 1 when the action's character codes sum to an even number. For a random
    model that is a coin flip per sample, so groups get mixed rewards and the trainer has signal
    without a model that can do anything."""

    @classmethod
    def bundled_rows(cls, split: str = "train", n: int = 0, seed: int = 0) -> list[dict[str, Any]]:
        return [
            {"id": f"{split}-{i}", "prompt": [{"role": "user", "content": f"Flip coin {i}."}]}
            for i in range(n or 20)
        ]

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        reward = 1.0 if sum(map(ord, action)) % 2 == 0 else 0.0
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={})


class LogsEnv(BaseTextEnv):
    """Four turns, each answered with a long log excerpt (about 70 tokens); at the end a reward
    of 1 when the actions' character codes sum to an even number (a coin flip for a random
    model). In a small context the logs overflow it, so the context strategies have work."""

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        self.actions = [*getattr(self, "actions", []), action]
        done = self.turns >= 4
        reward = float(sum(map(ord, "".join(self.actions))) % 2 == 0) if done else 0.0
        obs = f"log {self.turns}: " + "lorem ipsum dolor sit amet " * 12
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": obs}], reward=reward, done=done
        )

    @classmethod
    def bundled_rows(cls, split: str = "train", n: int = 0, seed: int = 0) -> list[dict[str, Any]]:
        return [
            {"id": f"{split}-{i}", "prompt": [{"role": "user", "content": f"Read the logs of job {i}."}]}
            for i in range(n or 20)
        ]


class BrokenSetupEnv(BaseTextEnv):
    """An env whose set-up always fails the way a missing dependency does: every episode is lost."""

    def init(self, prompt):  # noqa: ANN001, ANN201 - the published signature
        raise ModuleNotFoundError("No module named 'my_missing_dependency'")

    def step(self, action):  # noqa: ANN001, ANN201
        raise AssertionError("never reached")
