"""Small envs for the runtime tests (registered by the tests that need them)."""

from __future__ import annotations

import time
from typing import Any

from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput, EnvExample


class EchoEnv(BaseTextEnv):
    """Replies `ok N` to each turn; reward 0.1 a turn, 1.0 when the turn says DONE (then done)."""

    closed = 0

    def __init__(self, env_config: Any = None, extras: dict | None = None) -> None:
        super().__init__(env_config, extras)
        extras = extras or {}
        self.max_turns = int(extras.get("max_turns", 10))
        self.crash_on = int(extras.get("crash_on", -1))
        self.sleep_s = float(extras.get("sleep_s", 0.0))
        self.obs_text = str(extras.get("obs_text", "ok {n}"))
        self.as_dict = bool(extras.get("as_dict", False))
        self.actions: list[str] = []

    @classmethod
    def example(cls) -> EnvExample:
        return EnvExample(
            prompt=({"role": "user", "content": "Say DONE when you are done."},), good_actions=("DONE",)
        )

    def step(self, action: str) -> Any:
        self.turns += 1
        self.actions.append(action)
        if self.turns == self.crash_on:
            raise ConnectionError("sandbox went away")
        if self.sleep_s:
            time.sleep(self.sleep_s)
        done = "DONE" in action or self.turns >= self.max_turns
        reward = 1.0 if "DONE" in action else 0.1
        obs = [{"role": "user", "content": self.obs_text.format(n=self.turns)}]
        if self.as_dict:
            return {"observations": obs, "reward": reward, "done": done, "metadata": {}}
        return BaseTextEnvStepOutput(observations=obs, reward=reward, done=done)

    def get_metrics(self) -> dict[str, Any]:
        return {"turns": self.turns, "done_said": any("DONE" in a for a in self.actions)}

    def close(self) -> None:
        EchoEnv.closed += 1


def per_episode_script(tokenizer: Any, replies: list[str]) -> Any:
    """A ScriptedPolicy script that answers turn k of every episode with ``replies[k]`` (the turn
    is read from the context), so concurrent episodes do not share one reply sequence."""

    def script(prompt_ids: Any, index: int) -> str:
        turn = tokenizer.decode(list(prompt_ids)).count("<|im_start|>assistant") - 1
        return replies[min(turn, len(replies) - 1)]

    return script
