"""The bundled programming problems as :class:`CodeProblem` objects and as dataset rows.

Rows follow the published LiveCodeBench-like layout: ``prompt`` (chat messages), ``env_class``,
``reward_spec = {"method": "rule", "ground_truth": <JSON string of tests>, "func_name": ...}``
where each test is ``{"input", "output", "testtype"}``. Reference solutions never go into rows.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Literal

from skyrl_gym.envs.code._problems import PROBLEMS
from skyrl_gym.envs.code.types import CodeProblem, CodeTest, TestKind

__all__ = [
    "load_bundled_problems",
    "load_bundled_rows",
    "reference_of",
    "build_prompt",
    "SYSTEM_PROMPT",
    "TOOL_PROMPT",
]

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Solve the problem in Python 3. Give your final program "
    "in one fenced code block:\n```python\n# your code\n```\nThe last code block of your reply is "
    "run against hidden tests; it must pass all of them."
)
TOOL_PROMPT = (
    "\n\nBefore answering you may test code with the python tool, one call per turn:\n"
    '<tool_call>{"name": "python", "arguments": {"code": "print(1 + 1)"}}</tool_call>\n'
    "You will get <tool_response>output</tool_response>. When you are sure, reply with the final "
    "code block and no tool call."
)


@functools.cache
def _problems() -> tuple[CodeProblem, ...]:
    out = []
    for i, p in enumerate(PROBLEMS):
        kind = TestKind(p["kind"])
        func = p.get("func")
        tests = tuple(CodeTest(kind, inp, exp, func) for inp, exp in p["tests"])
        out.append(
            CodeProblem(
                id=p["id"],
                statement=p["statement"],
                tests=tests,
                reference=p["reference"],
                starter=p.get("starter", ""),
                split="test" if i % 5 == 4 else "train",
            )
        )
    return tuple(out)


def load_bundled_problems(split: Literal["train", "test"] | None = None) -> list[CodeProblem]:
    """The bundled problems (all, or one split); 20 train and 5 test."""
    if split not in (None, "train", "test"):
        raise ValueError(f"unknown split {split!r}; use 'train', 'test' or None")
    return [p for p in _problems() if split is None or p.split == split]


def reference_of(problem_id: str) -> str:
    """The reference solution of a bundled problem (for tests and examples, never for prompts)."""
    for p in _problems():
        if p.id == problem_id:
            return p.reference
    raise KeyError(f"no bundled code problem {problem_id!r}")


def build_prompt(problem: CodeProblem, *, tools: bool = False) -> list[dict[str, str]]:
    """Chat messages for ``problem``; ``tools=True`` describes the python tool too."""
    text = problem.statement
    if problem.tests[0].kind is TestKind.STDIN:
        text += "\n\nRead the input from standard input and print the answer to standard output."
        text += f"\n\nExample input:\n{problem.tests[0].input}"
    else:
        text += (
            "\n\nComplete this function (as written, or as a top-level function of the same name):"
            f"\n```python\n{problem.starter}\n```"
        )
    system = SYSTEM_PROMPT + (TOOL_PROMPT if tools else "")
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def _row(problem: CodeProblem, env_class: str) -> dict[str, Any]:
    tests = [{"input": t.input, "output": t.output, "testtype": t.kind.value} for t in problem.tests]
    spec: dict[str, Any] = {"method": "rule", "ground_truth": json.dumps(tests)}
    if problem.tests[0].func_name:
        spec["func_name"] = problem.tests[0].func_name
    return {
        "id": problem.id,
        "prompt": build_prompt(problem, tools=env_class == "code_multi_turn"),
        "env_class": env_class,
        "reward_spec": spec,
        "data_source": "skyrl/code",
    }


def load_bundled_rows(split: Literal["train", "test"], *, env_class: str = "code") -> list[dict[str, Any]]:
    """Dataset rows of one split for ``env_class`` (``code`` or ``code_multi_turn``)."""
    if split not in ("train", "test"):
        raise ValueError(f"unknown split {split!r}; use 'train' or 'test'")
    return [_row(p, env_class) for p in load_bundled_problems(split)]
