"""``lcb``: LiveCodeBench rows in the published skyrl-gym format, graded by the ``code`` grader.

One turn. The program is the last fenced block of the answer, whatever its language tag
(```` ```lang ```` then a newline, up to the next ```` ``` ````; stripped), as in the published
env; it is returned as ``metadata["parsed_code"]`` (None when there is no block, reward 0).
Reward 1.0 when the program passes every test, else 0.0. The rest of the metadata is the
``code`` env's (``passed``, ``tests_passed``, ``tests_total``, ``tests``, ``error``).

Rows: ``extras["reward_spec"]["ground_truth"]`` is the JSON string of a list of tests, each
``{"input": str, "output": str, "testtype": "stdin" | "functional", "metadata":
{"func_name": ...}}`` (see :mod:`skyrl_gym.envs.code.parsing`). A functional test without a
function name is a :class:`~skyrl_gym.errors.ConfigError` when the env is made.

Grading runs in the ``code`` env's sandbox (``env_config`` takes the :class:`CodeEnvConfig`
keys: ``sandbox``, ``test_timeout_s`` (6), ``total_timeout_s`` ((6 + 1) * tests + 5), ...).
As the published grader does, the program runs after a line of standard-library imports
(:data:`PRELUDE`: ``List``/``Optional``/... from ``typing``, ``defaultdict``, ``deque``,
``lru_cache``, ``heappush``, ``gcd``, ``bisect_left``, the modules ``math``, ``collections``,
``re``, ``sys``...), so LeetCode-style code that uses ``List[int]`` without importing it runs.
Unlike the published grader, numpy and pandas are not imported for the program (each test is a
fresh process here, and they cost a large part of a test's deadline).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.code.data import load_bundled_rows, reference_of
from skyrl_gym.envs.code.env import CodeEnv
from skyrl_gym.envs.code.types import GradeReport
from skyrl_gym.types import BaseTextEnvStepOutput, EnvExample

__all__ = ["LCBEnv", "PRELUDE", "extract_last_block", "with_prelude"]

_BLOCK = re.compile(r"```(?:\w+)?\n(.*?)```", re.DOTALL)

_PRELUDE_STATEMENTS = (
    "from typing import Any, Callable, Deque, Dict, Generator, Iterable, Iterator, List, Optional, "
    "Set, Tuple, Union",
    "from itertools import accumulate, chain, combinations, count, cycle, groupby, islice, pairwise, "
    "permutations, product, repeat, zip_longest",
    "from collections import Counter, OrderedDict, defaultdict, deque",
    "from functools import cache, cmp_to_key, lru_cache, partial, reduce",
    "from math import atan2, ceil, comb, factorial, floor, gcd, inf, isqrt, log, log2, log10, pi, prod, sqrt",
    "from heapq import heapify, heappop, heappush, heapreplace, merge, nlargest, nsmallest",
    "from bisect import bisect_left, bisect_right, insort",
    "from operator import iand, itemgetter, or_, sub, xor",
    "from random import randrange, shuffle",
    "from string import ascii_lowercase, ascii_uppercase",
    "from copy import deepcopy",
    "from re import search as re_search",
    "from os.path import commonprefix",
    "from time import time",
    # modules last: ``bisect``, ``copy``, ``random`` and friends name the module, as published
    "import bisect, collections, copy, datetime, functools, heapq, io, itertools, math, operator, os, "
    "random, re, string, sys",
)

PRELUDE = "; ".join(_PRELUDE_STATEMENTS) + "\n"
"""One line of imports run before the program (one line, so tracebacks are off by one only)."""


def extract_last_block(text: str) -> str | None:
    """The last fenced block of ``text`` (any language tag), stripped; None when there is none."""
    if not isinstance(text, str):
        return None
    blocks = _BLOCK.findall(text)
    return blocks[-1].strip() if blocks else None


def with_prelude(code: str) -> str:
    """``code`` with :data:`PRELUDE` inserted after its ``from __future__`` imports (if any)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return code  # reported as a compile error as it is
    cut = 0
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            cut = node.end_lineno or node.lineno
        elif i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a module docstring may come before the __future__ imports
        else:
            break
    lines = code.splitlines(keepends=True)
    head = "".join(lines[:cut])
    if head and not head.endswith("\n"):
        head += "\n"
    return head + PRELUDE + "".join(lines[cut:])


def _published_tests(row: Mapping[str, Any]) -> str:
    """A bundled row's tests in the published LiveCodeBench shape (func_name in each test)."""
    tests = json.loads(row["reward_spec"]["ground_truth"])
    name = row["reward_spec"].get("func_name")
    for t in tests:
        if t.get("testtype") == "functional":
            t["metadata"] = {"func_name": name}
    return json.dumps(tests)


class LCBEnv(CodeEnv):
    """LiveCodeBench in one turn (published row format); reward 1.0 when every test passes."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__(env_config, extras)
        self.parsed_code: str | None = None

    @classmethod
    def example(cls) -> EnvExample:
        row = next(r for r in load_bundled_rows("test") if r["reward_spec"].get("func_name"))
        return EnvExample(
            extras={"reward_spec": {"ground_truth": _published_tests(row)}},
            prompt=tuple(row["prompt"]),
            good_actions=(f"```python\n{reference_of(row['id'])}```",),
        )

    def extract_program(self, action: str) -> str | None:
        self.parsed_code = extract_last_block(action)
        return self.parsed_code

    def grade_program(self, code: str) -> GradeReport:
        return super().grade_program(with_prelude(code))

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        reward, meta = self._answer(action if isinstance(action, str) else "")
        return BaseTextEnvStepOutput(
            observations=[],
            reward=reward,
            done=True,
            metadata={"parsed_code": self.parsed_code, **meta},
            truncated=False,
        )
