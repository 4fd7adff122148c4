"""``aime``: competition math in one turn, graded Minerva style, reward +1 or -1.

The model ends its solution with a line ``Answer: <final answer>``. Grading reads only the last
300 characters of the turn (the longest MATH-500 answer is far shorter), takes the last
``Answer:`` there (case-insensitive; the answer runs to the end of the line or to a ``<``, so a
trailing ``<|im_end|>`` is not part of it), normalizes it with :func:`normalize_final_answer`
and compares it as a string with the normalized ground truth. No ``Answer:`` gives the
prediction ``"[INVALID]"``. Reward 1.0 when equal, else -1.0; the step metadata holds ``acc``
(bool) and ``pred`` (the normalized prediction), as in the published env.

Rows: ``extras["reward_model"]["ground_truth"]`` (the published env's key, which differs from
every other env's) or ``extras["reward_spec"]["ground_truth"]``; either works. A non-string
ground truth (an int from a parquet column) is compared as ``str(value)``.

The published rule is kept exactly (checked against skyrl-gym 0.4.0 in
``tests/envs/test_published_ids.py``), quirks included: ``033`` and ``33`` differ, and so do
``\\dfrac{1}{2}``, ``\\frac{1}{2}`` and ``0.5``. For a value-aware checker use
:func:`skyrl_gym.envs.math.answers_equal`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs._records import ground_truth
from skyrl_gym.types import BaseTextEnvStepOutput, EnvExample

__all__ = ["AIMEEnv", "AIMEScore", "normalize_final_answer", "extract_answer", "score_aime", "INVALID"]

INVALID = "[INVALID]"
"""The prediction when the turn has no ``Answer:`` in its last 300 characters."""

TAIL_CHARS = 300
"""Only this many final characters of a turn are read."""

_ANSWER = re.compile(r"answer\s*:\s*([^\n<]+)", re.IGNORECASE)

# Normalization, step 1: literal replacements, applied one after another in this order (the
# order matters: "an " goes before "a ", spaces go before "\text{and}" is matched).
_REPLACE: tuple[tuple[str, str], ...] = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
# Step 2: units, filler words and TeX spacing that are deleted, in this order.
_DELETE: tuple[str, ...] = (
    *("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units"),
    "\\ldots",
    *("sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds"),
    *("meters", "meals", "edges", "students", "childrentickets", "multiples"),
    *("\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}"),
    *("\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots"),
)
# Step 3: regex rewrites, in this order.
_FIRST_MATH = re.compile(r"(.*?)(\$)(.*?)(\$)(.*)")  # keep only the first $...$ span ("$x$")
_UNWRAP = (
    re.compile(r"\\text\{(.*?)\}"),
    re.compile(r"\\textbf\{(.*?)\}"),
    re.compile(r"\\overline\{(.*?)\}"),
    re.compile(r"\\boxed\{(.*)\}"),  # greedy: up to the last closing brace
)
_SHORT_FRAC = re.compile(r"frac([^{])(.)")  # \frac12 -> \frac{1}{2}
_SHORT_SQRT = re.compile(r"sqrt([^{])")  # \sqrt3 -> \sqrt{3}


def normalize_final_answer(answer: str) -> str:
    """The published Minerva normalization of a final answer (see the module docstring).

    Keeps what follows the last ``=``, applies the replacements and deletions above, keeps the
    first ``$...$`` span, unwraps ``\\text``/``\\textbf``/``\\overline``/``\\boxed``, expands the
    short forms ``\\fracab`` and ``\\sqrta``, drops ``$``, removes thousands separators from a
    whole number, and strips whitespace."""
    text = answer.rsplit("=", 1)[-1]
    for old, new in _REPLACE:
        text = text.replace(old, new)
    for junk in _DELETE:
        text = text.replace(junk, "")
    text = _FIRST_MATH.sub(r"$\3$", text)
    for pattern in _UNWRAP:
        text = pattern.sub(r"\1", text)
    text = _SHORT_FRAC.sub(r"frac{\1}{\2}", text)
    text = _SHORT_SQRT.sub(r"sqrt{\1}", text)
    text = text.replace("$", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def extract_answer(response: str) -> str:
    """The normalized last ``Answer:`` of the response's tail, or :data:`INVALID`."""
    found = _ANSWER.findall(response[-TAIL_CHARS:])
    return normalize_final_answer(found[-1] if found else INVALID)


@dataclass(frozen=True)
class AIMEScore:
    """The grade of one response."""

    reward: float
    """1.0 when the prediction equals the ground truth after normalization, else -1.0."""
    acc: bool
    """The prediction was right."""
    pred: str
    """The normalized prediction (:data:`INVALID` when there was none)."""


def score_aime(response: str, ground_truth: Any) -> AIMEScore:
    """Grade ``response`` against ``ground_truth`` with the published rule."""
    pred = extract_answer(response)
    acc = pred == normalize_final_answer(str(ground_truth))
    return AIMEScore(reward=1.0 if acc else -1.0, acc=acc, pred=pred)


def _ground_truth(extras: Mapping[str, Any]) -> Any:
    return ground_truth(
        extras,
        "aime needs the answer in extras['reward_model']['ground_truth'] (the published key) or "
        "extras['reward_spec']['ground_truth'], e.g. extras={'reward_model': {'ground_truth': '204'}}",
        keys=("reward_model", "reward_spec"),
    )


class AIMEEnv(BaseTextEnv):
    """Competition math, one turn, ending in ``Answer: ...``; reward +1 right, -1 otherwise."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__(env_config, extras)
        self.ground_truth = _ground_truth(self.extras)
        self.max_turns = 1
        self.score: AIMEScore | None = None

    @classmethod
    def example(cls) -> EnvExample:
        question = "What is the remainder when 2^10 is divided by 1000? End with 'Answer: <number>'."
        return EnvExample(
            extras={"reward_model": {"ground_truth": "24"}},
            prompt=({"role": "user", "content": question},),
            good_actions=("2^10 = 1024, and 1024 = 1000 + 24.\nAnswer: 24",),
        )

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        text = action if isinstance(action, str) else ("" if action is None else str(action))
        self.score = s = score_aime(text, self.ground_truth)
        return BaseTextEnvStepOutput(
            observations=[],
            reward=s.reward,
            done=True,
            metadata={"acc": s.acc, "pred": s.pred},
            truncated=False,
        )

    def get_metrics(self) -> dict[str, Any]:
        s = self.score
        return {"correct": bool(s and s.acc), "formatted": bool(s and s.pred != INVALID)}
