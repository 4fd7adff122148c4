"""Reading the model's answer (the last fenced code block) and a row's hidden tests.

Accepted test formats (``extras["reward_spec"]["ground_truth"]``, a JSON string or the decoded
value):

- LiveCodeBench style: a list of ``{"input": str, "output": str, "testtype": "stdin" |
  "functional"}``. A functional test names its function in ``"func_name"``, ``"fn_name"`` or
  ``"metadata": {"func_name": ...}`` (``metadata`` may itself be a JSON string, as in
  LiveCodeBench rows); otherwise ``reward_spec["func_name"]`` (or the row's
  ``metadata.func_name``) applies. A missing ``testtype`` means ``stdin``.
- APPS/TACO style: ``{"inputs": [...], "outputs": [...], "fn_name": optional}``.

Functional inputs are JSON values, one per line (one per argument); a non-string input of an
APPS-style functional test is taken as the argument list itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.code.types import CodeTest, TestKind
from skyrl_gym.errors import ConfigError

__all__ = ["extract_code", "parse_tests", "functional_args"]

# ```python / ```py / ```python3 / bare ```; the closing fence on a line of its own (or at the end)
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:\n[ \t]*```|```)", re.DOTALL)
_PY_TAGS = {"", "python", "py", "python3", "py3"}


def extract_code(text: str) -> str | None:
    """The last fenced Python (or untagged) code block of ``text``; None when there is none."""
    if not isinstance(text, str) or "```" not in text:
        return None
    blocks = [m.group(2) for m in _FENCE_RE.finditer(text) if m.group(1).lower() in _PY_TAGS]
    if not blocks or not blocks[-1].strip():
        return None
    return blocks[-1]


def _func_name_of(item: Mapping[str, Any], default: str | None) -> str | None:
    for key in ("func_name", "fn_name"):
        if isinstance(item.get(key), str):
            return item[key]
    meta = item.get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError:
            meta = None
    if isinstance(meta, Mapping) and isinstance(meta.get("func_name"), str):
        return meta["func_name"]
    return default


def parse_tests(ground_truth: Any, *, func_name: str | None = None) -> list[CodeTest]:
    """Hidden tests from a row's ground truth (see the module docstring for the formats).

    Raises :class:`ConfigError` (a dataset mistake, not the model's) when none can be read."""
    data = ground_truth
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"code env: ground_truth is not valid JSON ({exc}); see skyrl_gym.envs.code.parsing"
            ) from None
    tests: list[CodeTest] = []
    if isinstance(data, Mapping) and "inputs" in data and "outputs" in data:
        name = _func_name_of(data, func_name)
        kind = TestKind.FUNCTIONAL if name else TestKind.STDIN
        if len(data["inputs"]) != len(data["outputs"]):
            raise ConfigError("code env: ground_truth 'inputs' and 'outputs' differ in length")
        for inp, out in zip(data["inputs"], data["outputs"], strict=True):
            if kind is TestKind.FUNCTIONAL:
                inp = inp if isinstance(inp, str) else "\n".join(json.dumps(a) for a in inp)
                out = out if isinstance(out, str) else json.dumps(out)
            tests.append(CodeTest(kind, str(inp), str(out), name))
    elif isinstance(data, list):
        for i, item in enumerate(data):
            if not isinstance(item, Mapping) or "input" not in item or "output" not in item:
                raise ConfigError(
                    f"code env: test {i} must be a dict with 'input' and 'output', got {item!r:.100}"
                )
            try:
                kind = TestKind(item.get("testtype", "stdin"))
            except ValueError:
                raise ConfigError(
                    f"code env: test {i} has testtype {item.get('testtype')!r}; use 'stdin' or 'functional'"
                ) from None
            name = _func_name_of(item, func_name) if kind is TestKind.FUNCTIONAL else None
            if kind is TestKind.FUNCTIONAL and not name:
                raise ConfigError(
                    f"code env: functional test {i} names no function; add 'func_name' to the test "
                    "or to reward_spec"
                )
            tests.append(CodeTest(kind, str(item["input"]), str(item["output"]), name))
    else:
        raise ConfigError(
            "code env: ground_truth must be a list of {'input', 'output', 'testtype'} tests or an "
            f"{{'inputs': [...], 'outputs': [...]}} dict, got {type(data).__name__}"
        )
    if not tests:
        raise ConfigError("code env: ground_truth holds no tests")
    return tests


def functional_args(test: CodeTest) -> list[Any]:
    """The argument list of a functional test (one JSON value per non-empty line)."""
    try:
        return [json.loads(line) for line in test.input.split("\n") if line.strip()]
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"code env: functional test input is not JSON lines ({exc}): {test.input!r:.100}"
        ) from None
