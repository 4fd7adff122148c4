"""``calculator``: a two-turn tool-use task small enough to show RL progress with a 135M model on CPU.

Turn 1: the model calls the calculator with a native Hermes-style tool call::

    <tool_call>{"name": "calc", "arguments": {"expr": "37 * 12 + 5"}}</tool_call>

The env runs it and answers ``<tool_response>449</tool_response>``. Turn 2: the model answers
``<answer>449</answer>``. Reward: ``call_reward`` (0.2) for a well-formed call to ``calc`` plus
``answer_reward`` (0.8) for the right final answer, written as a number (``449``, ``-3``,
``1,204`` or ``2.5``): an arithmetic expression in ``<answer>`` scores nothing, even when it has
the right value, since writing the question's expression back skips the task (a main-job run
learned exactly that, 0.95 "success" with no tool call, before this rule). The episode ends
after the answer or at ``max_turns`` (2). The prompt carries four worked example exchanges, two
``(a + b) * c`` and two ``a + b * c`` in turn; why these is measured at ``_EXAMPLES``. Each row
names its question's shape, and ``skyrl train`` spreads the bundled rows evenly over the shapes.

What is learned is mostly the format (the tool does the arithmetic): this task shows the RL
mechanics working end to end, not reasoning gains.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import Any

from skyrl_gym.config import config_get
from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs.math.grader import answers_equal, safe_eval
from skyrl_gym.errors import ConfigError
from skyrl_gym.tools import ToolGroup, tool
from skyrl_gym.types import BaseTextEnvStepOutput, EnvExample

__all__ = ["CalculatorEnv", "CalculatorTools", "generate_calculator_rows", "SHAPES", "SYSTEM_PROMPT"]

SYSTEM_PROMPT = (
    "You can use a calculator. To use it, reply with exactly one tool call:\n"
    '<tool_call>{"name": "calc", "arguments": {"expr": "<arithmetic expression>"}}</tool_call>\n'
    "You will get <tool_response>result</tool_response>. Then reply with <answer>result</answer>."
)
# The worked example exchanges. Measured with SmolLM2-135M-Instruct at temperature 0.8 (32
# samples over 4 questions): one example gives 0/32 well-formed calls, two give 7/32. The second
# has parentheses, as a quarter of the questions do: with two examples without them the model
# wrote a call's expression without the question's parentheses (the token ' "(' had probability
# 0.017 at the expression's start; 0 of 112 training samples kept them) and GRPO never saw a
# right answer to those questions (main job: 0.63 held-out); with it that token has 0.08-0.36.
# With those two examples the main job still failed the parenthesized held-out questions most
# (0.49 and 0.68 success against 0.89 and 0.91 for the others, two runs of 2026-12-04): the
# trained model wrote "20 + 59) * 60" or "20 + 59 * 60". The third example, a second one with
# parentheses, lifted them to 0.99 (all held-out: 0.969, 12 steps at lr 4e-5) and the baseline from
# 0.02-0.03 to 0.086 (results/main-job/main-job-2026-12-04-3ex-12steps-cpu.json). The other
# side of that tilt: on a + b * c questions the untrained model added parentheses in 0.16 of
# first calls and copied the expression in 0.09 (`bench/calculator_examples.py`, training
# questions), and on some draws (the main job's seed 3) the trained policy wrote every plain
# question with parentheses (0.00 success on them). Tilting the other way (two a + b * c around
# one (a + b) * c, "balanced") only moved the failure: with the prompts spread by shape, seeds
# 1 and 2 then ended with 0.00 on the parenthesized questions. Two of each, alternating, a
# parenthesized one first (this set): the untrained success on the two shapes 0.19 and 0.16
# (against 0.01 and 0.09), and with the training prompts spread by shape
# (``bundled_stratify_by``) the main job ended at or above 0.9 on seeds 0-3 (results/main-job/history.md, 2026-12-05).
_EXAMPLES = (
    ("Compute (9 + 3) * 5.", "(9 + 3) * 5", 60),
    ("What is 12 + 4 * 7?", "12 + 4 * 7", 40),
    ("Calculate (14 + 7) * 3.", "(14 + 7) * 3", 63),
    ("Calculate 14 + 7 * 3.", "14 + 7 * 3", 35),
)


def _example_messages(examples: Sequence[tuple[str, str, int]] = _EXAMPLES) -> list[dict[str, str]]:
    messages = []
    for question, expr, value in examples:
        call = json.dumps({"name": "calc", "arguments": {"expr": expr}})
        messages += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": f"<tool_call>{call}</tool_call>"},
            {"role": "user", "content": f"<tool_response>{value}</tool_response>"},
            {"role": "assistant", "content": f"<answer>{value}</answer>"},
        ]
    return messages


_PHRASINGS = (
    "What is {e}?",
    "Compute {e}.",
    "Calculate {e}.",
    "Use the calculator to find {e}.",
    "What does {e} evaluate to?",
)
_ANSWER_RE = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)
_NUMBER_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")  # a number, not arithmetic
_MAX_EXPR = 200


class CalculatorTools(ToolGroup):
    """The ``calc`` tool."""

    def __init__(self) -> None:
        super().__init__(name="calculator")

    @tool
    def calc(self, expr: str) -> str:
        """Evaluate an arithmetic expression with + - * / ** and parentheses.

        Args:
            expr: The expression, e.g. "37 * 12 + 5".
        """
        if len(expr) > _MAX_EXPR:
            raise ValueError(f"expr must be at most {_MAX_EXPR} characters")
        value = safe_eval(expr)
        if value is None:
            raise ValueError("not an arithmetic expression (use numbers, + - * / ** and parentheses)")
        return str(value.numerator) if value.denominator == 1 else f"{float(value):.6g}"


SHAPES = ("a * b + c", "a + b * c", "a * b - c", "(a + b) * c")
"""The question shapes, drawn with equal chances; each row names its own in the ``shape`` field
(``skyrl train --stratify-by shape`` spreads them evenly through training)."""


def _expression(r: random.Random) -> tuple[str, str]:
    """A random expression and its shape."""
    a, b, c = r.randint(2, 99), r.randint(2, 99), r.randint(2, 99)
    shape = r.choice(SHAPES)
    return shape.replace("a", str(a)).replace("b", str(b)).replace("c", str(c)), shape


def generate_calculator_rows(
    n: int, *, split: str = "train", seed: int = 0, examples: Sequence[tuple[str, str, int]] | None = None
) -> list[dict[str, Any]]:
    """``n`` calculator problems; train and test come from disjoint seeded streams.

    ``examples``: the worked example exchanges of the prompt as ``(question, expression, value)``
    (default: the module's measured three; ``bench/calculator_examples.py`` compares sets)."""
    if split not in ("train", "test"):
        raise ValueError(f"unknown split {split!r}; use 'train' or 'test'")
    r = random.Random(f"skyrl-calculator-{split}-{seed}")
    rows = []
    for i in range(n):
        expr, shape = _expression(r)
        value = safe_eval(expr)
        assert value is not None and value.denominator == 1
        question = _PHRASINGS[i % len(_PHRASINGS)].format(e=expr)
        rows.append(
            {
                "id": f"calc-{split}-{seed}-{i:05d}",
                "expr": expr,
                "shape": shape,
                "prompt": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    *_example_messages(_EXAMPLES if examples is None else examples),
                    {"role": "user", "content": question},
                ],
                "env_class": "calculator",
                "reward_spec": {"method": "rule", "ground_truth": str(value.numerator)},
                "data_source": "skyrl/calculator",
            }
        )
    return rows


class CalculatorEnv(BaseTextEnv):
    """Two-turn calculator tool use: a JSON tool call, then <answer>N</answer>."""

    bundled_stratify_by = "shape"

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras)
        try:
            self.ground_truth = str(self.extras["reward_spec"]["ground_truth"])
        except (KeyError, TypeError):
            raise ConfigError(
                "calculator needs extras={'reward_spec': {'ground_truth': '<number>'}}; "
                "rows from generate_calculator_rows() have it"
            ) from None
        self.max_turns = int(self.extras.get("max_turns", config_get(env_config, "max_turns", 2)))
        self.call_reward = float(config_get(env_config, "call_reward", 0.2))
        self.answer_reward = float(config_get(env_config, "answer_reward", 0.8))
        self.tools = CalculatorTools()
        self.init_tool_groups([self.tools])
        self.called = False
        self.correct = False
        self.answered = False

    @classmethod
    def bundled_rows(cls, split: str = "train", n: int = 0, seed: int = 0) -> list[dict[str, Any]]:
        """Generated rows (400 when ``n`` is 0); train and test expressions are disjoint."""
        if split not in ("train", "test"):
            raise ConfigError(f"unknown split {split!r}; use 'train' or 'test'")
        return generate_calculator_rows(n or 400, split=split, seed=seed)

    @classmethod
    def example(cls) -> EnvExample:
        row = generate_calculator_rows(1, split="test")[0]
        call = json.dumps({"name": "calc", "arguments": {"expr": row["expr"]}})
        return EnvExample(
            extras={"reward_spec": row["reward_spec"]},
            prompt=tuple(row["prompt"]),
            good_actions=(
                f"<tool_call>{call}</tool_call>",
                f"<answer>{row['reward_spec']['ground_truth']}</answer>",
            ),
        )

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        answer = _ANSWER_RE.search(action)
        if answer is not None:
            self.answered = True
            text = answer.group(1)
            self.correct = _NUMBER_RE.fullmatch(text) is not None and answers_equal(text, self.ground_truth)
            reward = self.answer_reward if self.correct else 0.0
            meta = {"answer": answer.group(1)[:100]}
            return BaseTextEnvStepOutput(
                observations=[], reward=reward, done=True, metadata=meta, truncated=False
            )
        # the calculator is instant and pure: run it on this thread (no deadline thread needed)
        results = self.call_tools(action, "hermes", timeout=None)[:1]
        reward = 0.0
        meta: dict[str, Any] = {}
        if results:
            result = results[0]
            meta["tool_call"] = {"name": result.name, "error": result.error}
            if result.ok and not self.called:
                reward, self.called = self.call_reward, True
            content = f"<tool_response>{result.content}</tool_response>"
        else:
            meta["error"] = "no_tool_call"
            content = "Reply with a <tool_call> or an <answer>."
        done = self.turns >= self.max_turns
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": content}],
            reward=reward,
            done=done,
            metadata=meta,
            truncated=done,
        )

    def get_metrics(self) -> dict[str, Any]:
        return {"called_tool": self.called, "answered": self.answered, "correct": self.correct}
