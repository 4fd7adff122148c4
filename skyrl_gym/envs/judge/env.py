"""``judge_qa``: an open question, one answer, a reward from a judge (an LLM through LiteLLM).

The model answers in one turn (the last ``<answer>...</answer>`` is graded when present,
otherwise the whole turn). The judge compares it with
``extras["reward_spec"]["ground_truth"]["reference"]`` (a bare string works too; ``accept`` lists
extra acceptable phrases) and the reward is 1/0 (``verdict="binary"``) or the score / 10
(``verdict="score"``). An empty answer scores 0 without asking the judge (the model's mistake).

A judge failure (timeouts, connection errors, 429 and 5xx still failing after ``max_retries``,
another 4xx, a reply without a verdict) is an infrastructure failure: the env records it
(``judge_error_record``, and ``judge_error``/``judge_attempts`` in ``get_metrics()``) and ``step``
raises :class:`~skyrl_gym.envs.judge.types.JudgeError`, so the runtime masks the episode. It is
never scored 0.

``env_config`` keys are the fields of :class:`~skyrl_gym.envs.judge.types.JudgeConfig`:
``judge`` (``"llm"``, the default, needs ``judge_model``; ``"exact"`` is an offline,
deterministic string-match judge, used by ``example()`` and for tests without a server),
``judge_model``, ``api_base``, ``api_key_env``, ``verdict``, ``timeout_s``, ``max_retries``,
``backoff_s``, ``max_backoff_s``, ``max_answer_chars``, ``max_tokens``, ``temperature``::

    make("judge_qa", env_config={"judge_model": "openai/Qwen2.5-7B-Instruct",
                                 "api_base": "http://127.0.0.1:8000/v1"}, extras=row)
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from skyrl_gym.config import config_get
from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs.judge.data import load_bundled_rows
from skyrl_gym.envs.judge.judges import Judge, make_judge
from skyrl_gym.envs.judge.types import JudgeConfig, JudgeError
from skyrl_gym.errors import ConfigError
from skyrl_gym.types import BaseTextEnvStepOutput, ConversationType, EnvExample

__all__ = ["JudgeQAEnv", "judge_config_from"]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def judge_config_from(env_config: Any) -> JudgeConfig:
    """A :class:`JudgeConfig` from an ``env_config`` dict or attribute-style config."""
    values = {}
    for f in dataclasses.fields(JudgeConfig):
        value = config_get(env_config, f.name, None)
        if value is not None:
            values[f.name] = value
    try:
        return JudgeConfig(**values)
    except TypeError as exc:
        raise ConfigError(f"bad judge_qa env_config: {exc}") from None


def _ground_truth(extras: Any) -> tuple[str, tuple[str, ...]]:
    try:
        truth = extras["reward_spec"]["ground_truth"]
    except (KeyError, TypeError):
        truth = None
    if isinstance(truth, str) and truth.strip():
        return truth, ()
    if hasattr(truth, "get") and isinstance(truth.get("reference"), str):
        accept = truth.get("accept")
        return truth["reference"], () if accept is None else tuple(str(a) for a in accept)
    raise ConfigError(
        "judge_qa needs extras={'reward_spec': {'ground_truth': {'reference': '...', 'accept': [...]}}} "
        "(or a reference string); rows from skyrl_gym.envs.judge.load_bundled_rows() have it"
    )


class JudgeQAEnv(BaseTextEnv):
    """Open question, one answer, graded by an LLM judge (or the offline exact judge)."""

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras)
        self.reference, self.accept = _ground_truth(self.extras)
        self.config = judge_config_from(env_config)
        self.question: str = str(self.extras.get("question") or "")
        self.max_turns = 1
        self._judge: Judge | None = None
        self.verdict_correct = False
        self.score = 0.0
        self.judge_calls = 0
        self.judge_attempts = 0
        self.judge_error_record: dict[str, Any] | None = None
        """Set when the judge failed: ``{"kind", "attempts", "message"}``."""

    @property
    def judge(self) -> Judge:
        """The judge (built on first use: importing LiteLLM takes seconds)."""
        if self._judge is None:
            self._judge = make_judge(self.config, rng=self.rng)
        return self._judge

    @classmethod
    def example(cls) -> EnvExample:
        row = load_bundled_rows("test")[0]
        truth = row["reward_spec"]["ground_truth"]
        return EnvExample(
            env_config={"judge": "exact"},
            extras={"reward_spec": row["reward_spec"], "question": row["question"]},
            prompt=tuple(row["prompt"]),
            good_actions=(f"<answer>{truth['reference']}</answer>",),
        )

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        if not self.question:
            users = [m.get("content") for m in prompt if m.get("role") == "user"]
            self.question = users[-1] if users and isinstance(users[-1], str) else ""
        return prompt, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        answers = _ANSWER_RE.findall(action)
        answer = (answers[-1] if answers else action).strip()
        if not answer.replace("\x00", "").strip():
            return BaseTextEnvStepOutput(
                observations=[], reward=0.0, done=True, metadata={"error": "empty_answer"}, truncated=False
            )
        self.judge_calls += 1
        try:
            verdict = self.judge.grade(self.question, self.reference, answer, self.accept)
        except JudgeError as exc:
            self.judge_attempts += exc.attempts
            self.judge_error_record = {"kind": str(exc.kind), "attempts": exc.attempts, "message": str(exc)}
            raise
        self.judge_attempts += verdict.attempts
        self.verdict_correct, self.score = verdict.correct, verdict.score
        return BaseTextEnvStepOutput(
            observations=[],
            reward=verdict.score,
            done=True,
            metadata={
                "correct": verdict.correct,
                "judge": self.config.judge,
                "judge_attempts": verdict.attempts,
                "judge_reply": verdict.raw[-500:],
            },
            truncated=False,
        )

    def get_metrics(self) -> dict[str, Any]:
        return {
            "correct": self.verdict_correct,
            "score": self.score,
            "judge_calls": self.judge_calls,
            "judge_attempts": self.judge_attempts,
            "judge_error": self.judge_error_record is not None,
        }
