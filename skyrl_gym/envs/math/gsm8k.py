"""GSM8K-style math envs: single turn (``gsm8k``) and with feedback and retries (``gsm8k_multi_turn``).

The model writes its reasoning and ends with ``#### N``. The answer after the last ``####`` is
compared with ``extras["reward_spec"]["ground_truth"]`` by :func:`answers_equal` (so ``72.0``
matches ``72`` and ``1,000`` matches ``1000``; the published env compared strings).
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.config import config_get
from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs._records import ground_truth
from skyrl_gym.envs.math.data import generate_problems
from skyrl_gym.envs.math.grader import answers_equal, extract_gsm8k_answer
from skyrl_gym.errors import ConfigError
from skyrl_gym.types import BaseTextEnvStepOutput, EnvExample

__all__ = ["GSM8KEnv", "GSM8KMultiTurnEnv"]


def _ground_truth(extras: Any) -> str:
    fix = (
        "gsm8k envs need extras={'reward_spec': {'ground_truth': '<answer>'}} (the dataset row's reward_spec)"
    )
    return str(ground_truth(extras, fix))


class GSM8KEnv(BaseTextEnv):
    """Grade-school math, one turn: reasoning then '#### N'; reward 1 if N is right."""

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras)
        self.ground_truth = _ground_truth(self.extras)
        self.max_turns = 1
        self.answer: str | None = None

    @classmethod
    def bundled_rows(cls, split: str = "train", n: int = 0, seed: int = 0) -> list[dict[str, Any]]:
        """Generated arithmetic word problems (400 when ``n`` is 0), train and test disjoint."""
        if split not in ("train", "test"):
            raise ConfigError(f"unknown split {split!r}; use 'train' or 'test'")
        return generate_problems(n or 400, split=split, seed=seed, env_class="gsm8k")

    @classmethod
    def example(cls) -> EnvExample:
        row = generate_problems(1, split="test")[0]
        return EnvExample(
            extras={"reward_spec": row["reward_spec"]},
            prompt=tuple(row["prompt"]),
            good_actions=(f"{row['answer']}",),
        )

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        self.answer = extract_gsm8k_answer(action)
        correct = answers_equal(self.answer, self.ground_truth)
        meta: dict[str, Any] = {"parsed_answer": self.answer, "correct": correct}
        if self.answer is None:
            meta["error"] = "format"
        # One turn is the whole task: ending after it is termination, not truncation.
        return BaseTextEnvStepOutput(
            observations=[], reward=float(correct), done=True, metadata=meta, truncated=False
        )

    def get_metrics(self) -> dict[str, Any]:
        return {
            "correct": answers_equal(self.answer, self.ground_truth),
            "formatted": self.answer is not None,
        }


class GSM8KMultiTurnEnv(BaseTextEnv):
    """Grade-school math with feedback: wrong answers get another try, up to max_turns."""

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras)
        self.ground_truth = _ground_truth(self.extras)
        default_turns = config_get(env_config, "max_turns", 5)
        self.max_turns = int(self.extras.get("max_turns", default_turns))
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {self.max_turns}")
        self.format_reward = float(config_get(env_config, "format_reward", 0.2))
        self.solved = False
        self.formatted_turns = 0

    @classmethod
    def bundled_rows(cls, split: str = "train", n: int = 0, seed: int = 0) -> list[dict[str, Any]]:
        """The ``gsm8k`` problems (400 when ``n`` is 0) as ``gsm8k_multi_turn`` rows."""
        if split not in ("train", "test"):
            raise ConfigError(f"unknown split {split!r}; use 'train' or 'test'")
        return generate_problems(n or 400, split=split, seed=seed, env_class="gsm8k_multi_turn")

    @classmethod
    def example(cls) -> EnvExample:
        row = generate_problems(1, split="test", env_class="gsm8k_multi_turn")[0]
        return EnvExample(
            extras={"reward_spec": row["reward_spec"], "max_turns": 3},
            prompt=tuple(row["prompt"]),
            good_actions=("I am not sure. #### -1", row["answer"]),
        )

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        answer = extract_gsm8k_answer(action)
        self.solved = answers_equal(answer, self.ground_truth)
        left = self.max_turns - self.turns
        if self.solved:
            reward, feedback = 1.0, None
        elif answer is None:
            reward = 0.0
            feedback = 'I could not find a final answer. End your reply with "#### <number>".'
        else:
            self.formatted_turns += 1
            reward = self.format_reward / self.max_turns
            feedback = f"{answer} is not correct. Check your steps and try again."
        done = self.solved or left <= 0
        observations = []
        if not done and feedback is not None:
            observations = [{"role": "user", "content": f"{feedback} ({left} tries left)"}]
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=reward,
            done=done,
            metadata={"parsed_answer": answer, "correct": self.solved},
            truncated=done and not self.solved,
        )

    def get_metrics(self) -> dict[str, Any]:
        return {"steps": self.turns, "solved": self.solved}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        if not metrics:
            return {}
        return {
            "avg_steps": sum(m["steps"] for m in metrics) / len(metrics),
            "solve_rate": sum(bool(m["solved"]) for m in metrics) / len(metrics),
        }
