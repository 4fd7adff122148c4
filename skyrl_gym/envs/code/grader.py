"""Grading a program against hidden tests inside a sandbox.

The model's program runs as its own file (``solution.py``) in a fresh directory of the sandbox.
A stdin test feeds ``input`` on stdin; a functional test runs a small harness that loads the
program by path, calls the function with the arguments it reads from stdin and writes the JSON
return value to a channel of its own (the program's prints go to stderr). Expected outputs never
enter the sandbox: every comparison happens here, on the host.

Comparison: stdout and the expected output are split into lines after stripping both ends; each
line is compared with surrounding whitespace stripped, then (if that differs) token by token,
numbers within 1e-6 (relative or absolute). Return values compare as JSON values, numbers within
1e-6 likewise, tuples as lists.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import time
from typing import Any

from skyrl_gym.envs.code.parsing import functional_args
from skyrl_gym.envs.code.types import CodeTest, FailKind, GradeReport, TestKind, TestResult
from skyrl_gym.sandbox.types import EndReason, ExecResult, Sandbox

__all__ = ["grade", "compile_error", "not_compiled", "outputs_match", "values_match", "HARNESS"]

_SHOW = 300  # characters of output and stderr kept per test in the metadata
_TOL = 1e-6

#: Runs inside the sandbox: ``python3 -I harness.py SOLUTION FUNC`` with the JSON argument list
#: on stdin. Prints of the program go to stderr; the result goes to the original stdout.
HARNESS = r"""
import importlib.util, json, os, sys
channel = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
args = json.loads(sys.stdin.read())
sys.stdin = open(os.devnull)
path, name = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
spec = importlib.util.spec_from_file_location("solution", path)
mod = importlib.util.module_from_spec(spec)
sys.modules["solution"] = mod
spec.loader.exec_module(mod)
fn = None
cls = getattr(mod, "Solution", None)
if isinstance(cls, type) and callable(getattr(cls, name, None)):
    fn = getattr(cls(), name)
elif callable(getattr(mod, name, None)):
    fn = getattr(mod, name)
if fn is None:
    channel.write(json.dumps({"status": "no_function"}))
else:
    value = fn(*args)
    try:
        text = json.dumps({"status": "ok", "value": value})
    except (TypeError, ValueError):
        text = json.dumps({"status": "bad_return", "repr": repr(value)[:300]})
    channel.write(text)
channel.flush()
sys.stdout.flush()
os._exit(0)
"""


def _num(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _tokens_match(a: str, b: str) -> bool:
    ta, tb = a.split(), b.split()
    if len(ta) != len(tb):
        return False
    for x, y in zip(ta, tb, strict=True):
        if x == y:
            continue
        nx, ny = _num(x), _num(y)
        if nx is None or ny is None or not math.isclose(nx, ny, rel_tol=_TOL, abs_tol=_TOL):
            return False
    return True


def outputs_match(got: str, expected: str) -> bool:
    """Whether a program's stdout matches the expected output (see the module docstring)."""
    got_lines = [line.strip() for line in got.strip().splitlines()]
    exp_lines = [line.strip() for line in expected.strip().splitlines()]
    if len(got_lines) != len(exp_lines):
        return False
    return all(g == e or _tokens_match(g, e) for g, e in zip(got_lines, exp_lines, strict=True))


def values_match(got: Any, expected: Any) -> bool:
    """Whether two JSON values are equal (numbers within 1e-6; bools are not numbers)."""
    if isinstance(got, bool) or isinstance(expected, bool):
        return got is expected if isinstance(got, bool) and isinstance(expected, bool) else False
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
        return got == expected or math.isclose(got, expected, rel_tol=_TOL, abs_tol=_TOL)
    if isinstance(got, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(
            values_match(g, e) for g, e in zip(got, expected, strict=True)
        )
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(values_match(got[k], expected[k]) for k in got)
    return got == expected


def _failure(r: ExecResult) -> FailKind | None:
    """The failure kind of a run that did not end well, or None when it exited normally."""
    if r.timed_out or r.reason is EndReason.CPU_TIME_LIMIT:
        return FailKind.TIMEOUT
    if r.oom_killed or "MemoryError" in r.stderr[-2000:]:
        return FailKind.MEMORY
    if r.output_truncated or r.reason is EndReason.FILE_SIZE_LIMIT:
        return FailKind.OUTPUT_LIMIT
    if r.exit_code != 0:
        return FailKind.RUNTIME_ERROR
    return None


def _run_one(
    sandbox: Sandbox, test: CodeTest, index: int, grade_dir: str, timeout: float, python: str
) -> TestResult:
    if test.kind is TestKind.STDIN:
        r = sandbox.exec([python, "solution.py"], stdin=test.input, timeout=timeout, workdir=grade_dir)
        fail = _failure(r)
        if fail is None and not outputs_match(r.stdout, test.output):
            fail = FailKind.WRONG_ANSWER
        shown = r.stdout
    else:
        args = json.dumps(functional_args(test))
        assert test.func_name is not None
        r = sandbox.exec(
            [python, "-I", "harness.py", "solution.py", test.func_name],
            stdin=args,
            timeout=timeout,
            workdir=grade_dir,
        )
        fail = _failure(r)
        shown = r.stdout
        if fail is None:
            try:
                reply = json.loads(r.stdout)
                status = reply["status"]
            except (json.JSONDecodeError, KeyError, TypeError):
                reply, status = {}, "garbled"
            if status == "no_function":
                fail = FailKind.NO_FUNCTION
            elif status == "bad_return":
                fail, shown = FailKind.BAD_RETURN, str(reply.get("repr", ""))
            elif status != "ok":
                fail = FailKind.RUNTIME_ERROR
            else:
                shown = json.dumps(reply["value"])
                expected = json.loads(test.output)
                if not values_match(reply["value"], expected):
                    fail = FailKind.WRONG_ANSWER
    return TestResult(
        index=index,
        kind=test.kind,
        passed=fail is None,
        timed_out=fail is FailKind.TIMEOUT,
        error=fail,
        output=shown[:_SHOW],
        stderr=r.stderr[-_SHOW:],
    )


def compile_error(code: str) -> str | None:
    """The syntax error of ``code`` (compiled on the host, never run here), or None."""
    try:
        compile(code, "solution.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"[:_SHOW]
    except (RecursionError, MemoryError, OverflowError):
        return "the program is too deeply nested to compile"
    return None


def not_compiled(code: str, tests: list[CodeTest]) -> GradeReport | None:
    """The report of a program that does not compile (every test ``not_run``), or None."""
    err = compile_error(code)
    if err is None:
        return None
    skipped = tuple(TestResult(i, t.kind, False, error=FailKind.NOT_RUN) for i, t in enumerate(tests))
    return GradeReport(results=skipped, compile_error=err)


def grade(
    sandbox: Sandbox,
    code: str,
    tests: list[CodeTest],
    *,
    test_timeout_s: float = 6.0,
    total_timeout_s: float | None = None,
    stop_at_first_failure: bool = True,
    python: str = "python3",
) -> GradeReport:
    """Run ``code`` against ``tests`` in ``sandbox`` and compare on the host.

    ``total_timeout_s`` defaults to ``(test_timeout_s + 1) * len(tests) + 5``; each test gets
    ``min(test_timeout_s, time left)``. Tests after the first failure (when
    ``stop_at_first_failure``) or after the overall deadline are reported as ``not_run``."""
    failed = not_compiled(code, tests)
    if failed is not None:
        return failed
    total = total_timeout_s if total_timeout_s is not None else (test_timeout_s + 1) * len(tests) + 5
    deadline = time.monotonic() + total
    grade_dir = posixpath.join(sandbox.workdir, f".grade-{os.urandom(6).hex()}")
    sandbox.write_file(posixpath.join(grade_dir, "solution.py"), code)
    if any(t.kind is TestKind.FUNCTIONAL for t in tests):
        sandbox.write_file(posixpath.join(grade_dir, "harness.py"), HARNESS)
    results: list[TestResult] = []
    overall_timeout = False
    stop = False
    try:
        for i, test in enumerate(tests):
            left = deadline - time.monotonic()
            if left < 0.05:
                overall_timeout = True
            if stop or overall_timeout:
                results.append(TestResult(i, test.kind, False, error=FailKind.NOT_RUN))
                continue
            result = _run_one(sandbox, test, i, grade_dir, min(test_timeout_s, left), python)
            results.append(result)
            stop = stop_at_first_failure and not result.passed
    finally:
        sandbox.exec(["rm", "-rf", grade_dir], timeout=30)
    return GradeReport(results=tuple(results), overall_timeout=overall_timeout)
