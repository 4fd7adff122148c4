"""``bisect``: find a hidden whole number in a range from higher/lower feedback, within a budget.

The prompt names the range and the budget ("Find the number from 57 to 88. You have 6
guesses."). Each turn the model writes one guess, ``<guess>72</guess>``, and the env answers
``higher: the number is more than 72. Guesses left: 5.`` or ``lower: ...``; the right guess ends
the episode with reward 1.0. A turn without a readable guess (no ``<guess>`` tag, or not a whole
number inside) or with a number outside the range is an error observation that uses a turn. The
episode ends at the right guess or when the budget (``max_turns``) is spent (reward 0).
With ``env_config`` ``feedback=interval`` each answer also restates what the feedback so far
leaves, ``higher: the number is more than 72, so it is from 73 to 88. Guesses left: 5.`` (the
same game; the model no longer has to carry both bounds across turns itself). ``middle=question``
names the middle of the range in the question, ``Find the number from 57 to 88 (middle: 72).``
(the first bisection guess is then a copy); ``middle=always`` (with ``feedback=interval``) also
names the middle of the range left in every answer, ``..., so it is from 73 to 88 (middle:
80).``, so bisecting is copying the middle the last observation names (kvchain's skill: no guess
after the first can be written without reading the answer before it). ``marks=K`` (odd, 3 to 9,
with ``feedback=interval``) lists instead K evenly spaced numbers of the range left, its ends
and its middle among them, in the question and every answer: ``..., so it is from 73 to 88
(marks: 73, 75, 78, 80, 83, 85, 88).`` (:func:`marks_of`); bisecting is then choosing the middle
of the listed numbers each turn, not computing it, while a guess at any other mark still leaves
more to search. A policy that ignores the feedback still wins at most ``budget / size`` either
way. With
``guess_reward`` > 0 each wrong guess that is consistent with all the feedback so far also earns
that much on its turn (a per-turn reward for MT-GRPO; off by default), so a success is worth at
most ``1 + (budget - 1) * guess_reward``. ``guess_reward_by=split`` pays instead for what the
guess rules out: ``guess_reward`` times the numbers the worse answer would remove from the range
the feedback left, over half that range (rounded up). A middle guess earns the whole
``guess_reward``; a step up from the low end of 32 numbers earns 1/16 of it; a guess outside the
range left earns nothing. (With ``consistent``, the default, a policy earns as much by scanning
up one number at a time as by bisecting, and an MT-GRPO run learned exactly that scan.)

Bounds. Given the prompt the target is uniform over the ``size`` numbers of the range (splits
are made by range, never by target). A policy that ignores the feedback fixes its guesses before
it learns anything about the target, so it succeeds with probability at most ``budget / size``
(exactly that when its guesses are distinct and in range): with the defaults, 6 guesses over 32
numbers, 6/32 = 0.1875. A bisecting policy (guess the middle of what the feedback leaves) always
succeeds when ``budget >= ceil(log2(size + 1))`` (6 for 32 numbers, 7 for 64), the default
budget.

Metrics. Each step's ``metadata`` holds ``consistent``: True when the turn's guess lies inside
every bound the feedback so far allows (a repeated wrong guess, an out-of-range guess or a turn
without a guess is not), ``guess`` (None without one), ``feedback`` (``higher``, ``lower``,
``correct`` or None) and ``error`` on a mistake. ``get_metrics()``: ``success``, ``guesses``
(readable in-range guesses), ``consistent_guesses``, ``consistent_fraction`` (consistent
guesses over turns taken), ``middle_guesses`` (guesses at the middle of the range the feedback
left, ``(low + high) // 2``: the bisection move), ``turns``, ``budget``, ``size`` and ``depth``.

Splits: a row is drawn from ``random.Random(f"skyrl-bisect-{split}-{seed}-{i}")``: the range's
low end uniformly among the numbers from 1 to ``max_start`` (100) whose range
:func:`skyrl_gym.envs._generated.split_of` puts in the row's split (the CRC-32 of
``bisect:<lo>-<hi>`` even for train, odd for test), then the target uniformly in the range. So
held-out rows use ranges that training never shows, under any seeds. ``depth`` (the row's
stratify field) is the number of guesses the midpoint bisection takes for its target.

``env_config`` keys (all optional; an unknown key raises ``ConfigError``): ``examples`` (worked
example episodes in the prompt, 0 to 3; when set the env writes the prompt itself: the system
prompt, that many examples, the question; unset: the row's prompt, which for bundled rows has
1), ``guess_reward`` (0.0: the per-turn reward of a consistent wrong guess), ``guess_reward_by``
(``consistent``, the default, or ``split``: see above), ``feedback`` (``plain``, the default,
or ``interval``: the answers restate the range left; the worked examples, written by the env
then, show the same answers), ``middle`` (``none``, the default, ``question`` or ``always``: see
above; the worked examples show the same), ``marks`` (0, off, or an odd count from 3 to 9: see
above), ``budget`` (the number of turns, the row's ``budget``: ``ceil(log2(size + 1))``), and the
difficulty: ``size`` (numbers in a range, 32) and ``max_start`` (100). Setting either makes the
env draw its range and target anew from the row's ``seed`` and ``split`` (deterministic, still
in the row's split). Whenever the range or budget changes, the env rewrites the question.
"""

from __future__ import annotations

import random
import re
from typing import Any

from skyrl_gym.config import config_get
from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs._generated import check_config_keys, check_split, config_float, config_int, split_of
from skyrl_gym.errors import ConfigError
from skyrl_gym.types import BaseTextEnvStepOutput, EnvExample

__all__ = [
    "BisectEnv",
    "generate_bisect_rows",
    "make_bisect_instance",
    "build_bisect_prompt",
    "bisection_guesses",
    "min_budget",
    "marks_of",
    "SIZE",
    "MAX_START",
    "SYSTEM_PROMPT",
    "FEEDBACK",
    "GUESS_REWARD_BY",
]

SIZE = 32
"""Numbers in a range of the bundled rows."""
MAX_START = 100
"""The largest low end of a bundled row's range."""

SYSTEM_PROMPT = (
    "Let's play a guessing game. I think of a whole number in the range you are told. Reply with "
    "one guess as <guess>N</guess>. I answer higher (the number is more than your guess), lower "
    "(the number is less than your guess) or correct. Find the number within the allowed guesses."
)
_QUESTION = "Find the number from {lo} to {hi}. You have {budget} guesses."
_MIDDLE_QUESTION = "Find the number from {lo} to {hi} (middle: {mid}). You have {budget} guesses."
_MARKS_QUESTION = "Find the number from {lo} to {hi} (marks: {marks}). You have {budget} guesses."
# The worked example episodes (lo, hi, target) of the bundled size, played by midpoint bisection
# with budget 6; other sizes and budgets scale them (_example_games).
_EXAMPLES = ((1, 32, 21), (40, 71, 66), (75, 106, 80))
_GUESS_RE = re.compile(r"<guess>\s*(.*?)\s*</guess>", re.DOTALL)
_NUMBER_RE = re.compile(r"[+-]?\d{1,12}")


def min_budget(size: int) -> int:
    """The guesses midpoint bisection needs at most over ``size`` numbers: ``ceil(log2(size + 1))``."""
    return int(size).bit_length()


def bisection_guesses(lo: int, hi: int, target: int) -> list[int]:
    """The guesses of midpoint bisection (``(low + high) // 2``) from ``[lo, hi]`` until ``target``."""
    if not lo <= target <= hi:
        raise ValueError(f"target {target} is not in [{lo}, {hi}]")
    guesses = []
    while True:
        mid = (lo + hi) // 2
        guesses.append(mid)
        if mid == target:
            return guesses
        lo, hi = (mid + 1, hi) if target > mid else (lo, mid - 1)


FEEDBACK = ("plain", "interval")
"""The answer styles: ``plain`` (higher/lower) and ``interval`` (also the range the feedback leaves)."""
MIDDLE = ("none", "question", "always")
"""Where the middle of the range left is named: nowhere, in the question, or in every answer too."""


MAX_MARKS = 9
"""The most marks an answer may list (``marks``)."""


def marks_of(low: int, high: int, count: int) -> list[int]:
    """``count`` (odd) evenly spaced numbers from ``low`` to ``high``, both ends included, rounded
    down, without repeats (so every number of a range shorter than ``count``); the middle one, at
    index ``(len - 1) // 2``, is the midpoint bisection guesses, ``(low + high) // 2``."""
    if count < 3 or count % 2 == 0:
        raise ValueError(f"count must be odd and at least 3, got {count}")
    if low >= high:
        return [low]
    return sorted({low + (j * (high - low)) // (count - 1) for j in range(count)})


def _marks_text(low: int, high: int, count: int) -> str:
    return ", ".join(str(m) for m in marks_of(low, high, count))


def _question(lo: int, hi: int, budget: int, middle: str = "none", marks: int = 0) -> str:
    if marks:
        return _MARKS_QUESTION.format(lo=lo, hi=hi, marks=_marks_text(lo, hi, marks), budget=budget)
    if middle != "none":
        return _MIDDLE_QUESTION.format(lo=lo, hi=hi, mid=(lo + hi) // 2, budget=budget)
    return _QUESTION.format(lo=lo, hi=hi, budget=budget)


def _feedback(
    guess: int,
    target: int,
    left: int,
    interval: tuple[int, int] | None = None,
    middle: bool = False,
    marks: int = 0,
) -> str:
    """The answer to a wrong in-range guess; ``interval``: the range left after it, restated
    (``middle``: with its middle; ``marks``: with that many evenly spaced numbers of it)."""
    word, relation = ("higher", "more") if guess < target else ("lower", "less")
    text = f"{word}: the number is {relation} than {guess}"
    if interval is not None:
        text += f", so it is from {interval[0]} to {interval[1]}"
        if middle:
            text += f" (middle: {(interval[0] + interval[1]) // 2})"
        elif marks:
            text += f" (marks: {_marks_text(interval[0], interval[1], marks)})"
    return f"{text}. Guesses left: {left}."


def _example_games(count: int, size: int = SIZE, budget: int = 6) -> list[tuple[int, int, int]]:
    """The worked example games ``(lo, hi, target)`` for questions over ``size`` numbers with
    ``budget`` guesses: :data:`_EXAMPLES` themselves for 32 numbers and 6 guesses or more, else the
    same low ends with ranges of ``size`` numbers and each target at the same place in its range,
    moved to the nearest number that bisection finds within the budget (so no example fails)."""
    games = []
    for lo, hi, target in _EXAMPLES[:count]:
        new_hi = lo + size - 1
        place = lo + round((target - lo) * (size - 1) / (hi - lo))
        by_distance = sorted(range(lo, new_hi + 1), key=lambda t: (abs(t - place), t))
        reachable = [t for t in by_distance if len(bisection_guesses(lo, new_hi, t)) <= budget]
        if not reachable:
            raise ConfigError(f"bisect: no target of {size} numbers is found within {budget} guesses")
        games.append((lo, new_hi, reachable[0]))
    return games


def _example_messages(
    count: int,
    budget: int = 6,
    feedback: str = "plain",
    size: int = SIZE,
    middle: str = "none",
    marks: int = 0,
) -> list[dict[str, str]]:
    messages = []
    for lo, hi, target in _example_games(count, size, budget):
        messages.append({"role": "user", "content": _question(lo, hi, budget, middle, marks)})
        low, high = lo, hi
        for i, guess in enumerate(bisection_guesses(lo, hi, target)):
            messages.append({"role": "assistant", "content": f"<guess>{guess}</guess>"})
            if guess == target:
                break
            low, high = (guess + 1, high) if guess < target else (low, guess - 1)
            interval = (low, high) if feedback == "interval" else None
            answer = _feedback(
                guess, target, budget - i - 1, interval, middle=middle == "always", marks=marks
            )
            messages.append({"role": "user", "content": answer})
    return messages


def _is_question(content: Any) -> bool:
    return isinstance(content, str) and content.startswith(_QUESTION.split("{", 1)[0])


def _check_feedback(feedback: Any, middle: Any = "none", marks: Any = 0) -> None:
    if feedback not in FEEDBACK:
        raise ConfigError(f"bisect feedback must be one of {', '.join(FEEDBACK)}, got {feedback!r}")
    if middle not in MIDDLE:
        raise ConfigError(f"bisect middle must be one of {', '.join(MIDDLE)}, got {middle!r}")
    if middle == "always" and feedback != "interval":
        raise ConfigError(
            "bisect middle=always names the middle of the range each answer restates, so it needs "
            "feedback=interval (or use middle=question)"
        )
    if isinstance(marks, bool) or not isinstance(marks, int):
        raise ConfigError(f"bisect marks must be a whole number, got {marks!r}")
    if marks:
        if marks < 3 or marks > MAX_MARKS or marks % 2 == 0:
            raise ConfigError(f"bisect marks must be 0 (off) or odd from 3 to {MAX_MARKS}, got {marks}")
        if feedback != "interval" or middle != "none":
            raise ConfigError(
                "bisect marks lists numbers of the range each answer restates, so it needs "
                "feedback=interval and middle=none (the middle is one of the marks)"
            )


def build_bisect_prompt(
    lo: int,
    hi: int,
    budget: int,
    *,
    examples: int = 1,
    feedback: str = "plain",
    middle: str = "none",
    marks: int = 0,
) -> list[dict[str, str]]:
    """The prompt of a game over ``[lo, hi]`` with ``budget`` guesses: the system prompt,
    ``examples`` worked example episodes (0 to 3: games of the same size and budget, played by
    bisection, their answers in the ``feedback``, ``middle`` and ``marks`` style) and the question."""
    if not 0 <= examples <= len(_EXAMPLES):
        raise ConfigError(f"examples must be from 0 to {len(_EXAMPLES)}, got {examples}")
    _check_feedback(feedback, middle, marks)
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        *_example_messages(examples, budget, feedback, size=hi - lo + 1, middle=middle, marks=marks),
        {"role": "user", "content": _question(lo, hi, budget, middle, marks)},
    ]


def make_bisect_instance(
    seed: str, split: str, size: int = SIZE, max_start: int = MAX_START
) -> tuple[int, int, int]:
    """``(lo, hi, target)`` drawn from ``random.Random(seed)``: ``lo`` uniformly among the low ends
    from 1 to ``max_start`` whose range belongs to ``split``, the target uniformly in the range."""
    check_split(split)
    if size < 2 or max_start < 1:
        raise ConfigError(
            f"bisect needs size >= 2 and max_start >= 1, got size={size}, max_start={max_start}"
        )
    starts = [lo for lo in range(1, max_start + 1) if split_of(f"bisect:{lo}-{lo + size - 1}") == split]
    if not starts:
        raise ConfigError(
            f"no range with a low end from 1 to {max_start} belongs to the {split!r} split; raise max_start"
        )
    r = random.Random(seed)
    lo = r.choice(starts)
    hi = lo + size - 1
    return lo, hi, r.randint(lo, hi)


def generate_bisect_rows(
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    size: int = SIZE,
    max_start: int = MAX_START,
    budget: int | None = None,
    examples: int = 1,
) -> list[dict[str, Any]]:
    """``n`` games; row ``i`` is drawn from the seed string ``skyrl-bisect-{split}-{seed}-{i}``
    with a range of ``split`` only (train and test share no range). ``budget``: guesses per game
    (default :func:`min_budget` of ``size``); ``examples``: worked example episodes (0 to 3)."""
    check_split(split)
    budget = min_budget(size) if budget is None else int(budget)
    if budget < 1:
        raise ConfigError(f"budget must be at least 1, got {budget}")
    rows = []
    for i in range(n):
        instance_seed = f"skyrl-bisect-{split}-{seed}-{i}"
        lo, hi, target = make_bisect_instance(instance_seed, split, size, max_start)
        rows.append(
            {
                "id": f"bisect-{split}-{seed}-{i:05d}",
                "lo": lo,
                "hi": hi,
                "size": size,
                "budget": budget,
                "depth": len(bisection_guesses(lo, hi, target)),
                "seed": instance_seed,
                "split": split,
                "prompt": build_bisect_prompt(lo, hi, budget, examples=examples),
                "env_class": "bisect",
                "reward_spec": {"method": "rule", "ground_truth": target},
                "data_source": "skyrl/bisect",
            }
        )
    return rows


_CONFIG_KEYS = (
    "examples",
    "budget",
    "size",
    "max_start",
    "feedback",
    "middle",
    "marks",
    "guess_reward",
    "guess_reward_by",
)
GUESS_REWARD_BY = ("consistent", "split")
"""What a wrong guess's per-turn reward pays for (``guess_reward_by``)."""


def _row_int(extras: Any, key: str) -> int:
    value = extras.get(key)
    if isinstance(value, bool) or not isinstance(value, int | str) or not re.fullmatch(r"-?\d+", str(value)):
        raise ConfigError(
            f"bisect needs extras with whole numbers 'lo', 'hi' and reward_spec.ground_truth; "
            f"{key!r} is {value!r} (rows from generate_bisect_rows() have them)"
        )
    return int(value)


class BisectEnv(BaseTextEnv):
    """Guess a hidden number with ``<guess>N</guess>``; feedback higher/lower; a guess budget."""

    bundled_stratify_by = "depth"

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras)
        check_config_keys(env_config, _CONFIG_KEYS, "bisect")
        self.lo, self.hi = _row_int(self.extras, "lo"), _row_int(self.extras, "hi")
        self.target = _row_int(self.extras.get("reward_spec") or {}, "ground_truth")
        if not self.lo <= self.target <= self.hi:
            raise ConfigError(f"bisect target {self.target} is not in the row's range [{self.lo}, {self.hi}]")
        self.examples = config_int(env_config, "examples", None, 0, len(_EXAMPLES))
        self.feedback = config_get(env_config, "feedback", "plain")
        if not isinstance(self.feedback, str):
            raise ConfigError(
                f"env_config 'feedback' must be one of {', '.join(FEEDBACK)}, got {self.feedback!r}"
            )
        self.middle = config_get(env_config, "middle", "none")
        self.marks = config_int(env_config, "marks", 0, 0, MAX_MARKS)
        _check_feedback(self.feedback, self.middle, self.marks)
        self.guess_reward = config_float(env_config, "guess_reward", 0.0, 0.0, 1.0)
        self.guess_reward_by = config_get(env_config, "guess_reward_by", "consistent")
        if self.guess_reward_by not in GUESS_REWARD_BY:
            raise ConfigError(
                f"env_config 'guess_reward_by' must be one of {', '.join(GUESS_REWARD_BY)}, "
                f"got {self.guess_reward_by!r}"
            )
        size = config_int(env_config, "size", None, 2)
        max_start = config_int(env_config, "max_start", None, 1)
        self.drawn_again = size is not None or max_start is not None
        if self.drawn_again:
            seed, split = self.extras.get("seed"), self.extras.get("split")
            if not isinstance(seed, str) or split not in ("train", "test"):
                raise ConfigError(
                    "env_config 'size'/'max_start' draw the game anew from the row's 'seed' and "
                    "'split' fields; this row has none (rows from generate_bisect_rows() do)"
                )
            size = self.hi - self.lo + 1 if size is None else size
            self.lo, self.hi, self.target = make_bisect_instance(seed, split, size, max_start or MAX_START)
        self.size = self.hi - self.lo + 1
        row_budget = self.extras.get("budget") if not self.drawn_again else None
        default = int(row_budget) if row_budget is not None else min_budget(self.size)
        self.budget = config_int(env_config, "budget", default, 1)
        self.budget_changed = self.budget != default or self.drawn_again
        self.max_turns = self.budget
        self.low, self.high = self.lo, self.hi  # what the feedback so far allows
        self.guesses = self.consistent_guesses = self.middle_guesses = 0
        self.success = False

    @classmethod
    def bundled_rows(cls, split: str = "train", n: int = 0, seed: int = 0) -> list[dict[str, Any]]:
        """Generated games (400 when ``n`` is 0) over 32 numbers with 6 guesses; train and test
        ranges are disjoint (module docstring)."""
        check_split(split)
        return generate_bisect_rows(n or 400, split=split, seed=seed)

    @classmethod
    def example(cls) -> EnvExample:
        row = generate_bisect_rows(1, split="test")[0]
        extras = {
            key: row[key] for key in ("lo", "hi", "size", "budget", "depth", "seed", "split", "reward_spec")
        }
        guesses = bisection_guesses(row["lo"], row["hi"], row["reward_spec"]["ground_truth"])
        return EnvExample(
            extras=extras,
            prompt=tuple(row["prompt"]),
            good_actions=tuple(f"<guess>{g}</guess>" for g in guesses),
        )

    def _question(self) -> dict[str, str]:
        return {"role": "user", "content": _question(self.lo, self.hi, self.budget, self.middle, self.marks)}

    def init(self, prompt: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        messages = [dict(m) for m in prompt] if isinstance(prompt, list | tuple) else []
        if self.budget_changed or self.middle != "none" or self.marks or not messages:
            messages = [*messages[:-1], self._question()]
        examples = self.examples
        if examples is None and (self.feedback != "plain" or self.middle != "none" or self.marks):
            # the row's own examples answer plainly: write them again in this env's style
            asked = [m for m in messages[:-1] if m.get("role") == "user" and _is_question(m.get("content"))]
            examples = min(len(asked), len(_EXAMPLES))
        if examples is not None:
            messages = [
                {"role": "system", "content": SYSTEM_PROMPT},
                *_example_messages(
                    examples,
                    self.budget,
                    self.feedback,
                    size=self.hi - self.lo + 1,
                    middle=self.middle,
                    marks=self.marks,
                ),
                messages[-1],
            ]
        return messages, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        left = self.budget - self.turns
        meta: dict[str, Any] = {"guess": None, "feedback": None, "consistent": False, "middle": False}
        match = _GUESS_RE.search(action)
        text = match.group(1) if match is not None else None
        if text is None or not _NUMBER_RE.fullmatch(text):
            meta["error"] = "no_guess" if text is None else "bad_guess"
            content = f"Reply with <guess>N</guess>, a whole number from {self.lo} to {self.hi}. Guesses left: {left}."
            return self._out(content, 0.0, meta)
        guess = int(text)
        meta["guess"] = guess
        if not self.lo <= guess <= self.hi:
            meta["error"] = "out_of_range"
            return self._out(f"{guess} is not from {self.lo} to {self.hi}. Guesses left: {left}.", 0.0, meta)
        self.guesses += 1
        meta["consistent"] = self.low <= guess <= self.high
        # the numbers the worse answer would rule out, over half the range left (rounded up)
        split = min(guess - self.low + 1, self.high - guess + 1) / ((self.high - self.low + 2) // 2)
        meta["middle"] = guess == (self.low + self.high) // 2 and meta["consistent"]
        self.consistent_guesses += meta["consistent"]
        self.middle_guesses += meta["middle"]
        if guess == self.target:
            self.success = True
            meta["feedback"] = "correct"
            return BaseTextEnvStepOutput(
                observations=[], reward=1.0, done=True, metadata=meta, truncated=False
            )
        if guess < self.target:
            meta["feedback"] = "higher"
            self.low = max(self.low, guess + 1)
        else:
            meta["feedback"] = "lower"
            self.high = min(self.high, guess - 1)
        interval = (self.low, self.high) if self.feedback == "interval" else None
        if not meta["consistent"]:
            reward = 0.0
        elif self.guess_reward_by == "split":
            reward = self.guess_reward * split
        else:
            reward = self.guess_reward
        answer = _feedback(
            guess, self.target, left, interval, middle=self.middle == "always", marks=self.marks
        )
        return self._out(answer, reward, meta)

    def _out(self, content: str, reward: float, meta: dict[str, Any]) -> BaseTextEnvStepOutput:
        done = self.turns >= self.max_turns
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": content}],
            reward=reward,
            done=done,
            metadata=meta,
            truncated=done,
        )

    def get_metrics(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "guesses": self.guesses,
            "consistent_guesses": self.consistent_guesses,
            "consistent_fraction": self.consistent_guesses / self.turns if self.turns else 0.0,
            "middle_guesses": self.middle_guesses,
            "turns": self.turns,
            "budget": self.budget,
            "size": self.size,
            "depth": len(bisection_guesses(self.lo, self.hi, self.target)),
        }
