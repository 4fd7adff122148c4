"""The ``code`` and ``code_multi_turn`` envs on the local sandbox backend (real processes)."""

from __future__ import annotations

import json
import os
import secrets
import time

import pytest

import skyrl_gym
from skyrl_gym.config import ConfigView
from skyrl_gym.envs.code import (
    CodeEnvConfig,
    FailKind,
    TestKind,
    extract_code,
    load_bundled_problems,
    load_bundled_rows,
    outputs_match,
    parse_tests,
    reference_of,
    values_match,
)
from skyrl_gym.errors import ConfigError, SkyRLError


def block(code: str) -> str:
    return f"Here you go.\n```python\n{code}\n```\n"


def stdin_row(tests: list[tuple[str, str]]) -> dict:
    gt = [{"input": i, "output": o, "testtype": "stdin"} for i, o in tests]
    return {"reward_spec": {"ground_truth": json.dumps(gt)}}


def make(extras: dict, env_id: str = "code", **config):
    return skyrl_gym.make(env_id, env_config=config, extras=extras)


def run(code: str, extras: dict, **config):
    env = make(extras, **config)
    try:
        out = env.step(block(code))
        return out, env.get_metrics()
    finally:
        env.close()


# ------------------------------------------------------------------ parsing
def test_extract_code_takes_the_last_python_or_bare_block():
    text = "try\n```python\nprint(1)\n```\nbetter:\n```\nprint(2)\n```\nexplain\n```text\nnot code\n```"
    assert extract_code(text) == "print(2)"
    assert extract_code("```py\nx = 1\ny = 2\n```") == "x = 1\ny = 2"
    assert extract_code("```python3\nprint('a')```") == "print('a')"
    assert extract_code("no code here") is None
    assert extract_code("```cpp\nint main(){}\n```") is None
    assert extract_code("```python\n   \n```") is None
    assert extract_code("```python\nprint(1)\n") is None  # never closed


def test_parse_tests_accepts_livecodebench_and_apps_layouts():
    lcb = [
        {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
        {"input": "[1, 2]\n3", "output": "true", "testtype": "functional", "metadata": '{"func_name": "f"}'},
        {"input": '"x"', "output": "1", "testtype": "functional", "fn_name": "g"},
        {"input": "5", "output": "5"},  # no testtype: stdin
    ]
    tests = parse_tests(json.dumps(lcb))
    assert [t.kind for t in tests] == [
        TestKind.STDIN,
        TestKind.FUNCTIONAL,
        TestKind.FUNCTIONAL,
        TestKind.STDIN,
    ]
    assert [t.func_name for t in tests] == [None, "f", "g", None]
    row_level = parse_tests([{"input": "1", "output": "1", "testtype": "functional"}], func_name="h")
    assert row_level[0].func_name == "h"
    apps = parse_tests({"inputs": [[1, 2], [3, 4]], "outputs": [3, 7], "fn_name": "add"})
    assert apps[0].input == "1\n2" and apps[1].output == "7" and apps[0].kind is TestKind.FUNCTIONAL
    plain = parse_tests({"inputs": ["1\n"], "outputs": ["1\n"]})
    assert plain[0].kind is TestKind.STDIN


@pytest.mark.parametrize(
    "truth, text",
    [
        ("{not json", "not valid JSON"),
        ("[]", "no tests"),
        ([{"input": "1"}], "'input' and 'output'"),
        ([{"input": "1", "output": "1", "testtype": "functional"}], "names no function"),
        ([{"input": "1", "output": "1", "testtype": "unit"}], "'stdin' or 'functional'"),
        (42, "must be a list"),
    ],
)
def test_bad_ground_truth_is_a_config_error(truth, text):
    with pytest.raises(ConfigError, match=text) as info:
        make({"reward_spec": {"ground_truth": truth}})
    assert isinstance(info.value, SkyRLError) and isinstance(info.value, ValueError)


def test_missing_reward_spec_says_how_to_fix():
    with pytest.raises(ConfigError, match="load_bundled_rows"):
        make({})


def test_output_and_value_comparison():
    assert outputs_match("1 2  \n3\n\n", "1 2\n3")
    assert outputs_match("0.3333333\n", "0.33333333")
    assert not outputs_match("1 2\n", "1 2\n3\n")
    assert not outputs_match("2.33\n", "2.333\n")
    assert not outputs_match("yes", "YES")
    assert values_match([1, 2.0000000001], (1, 2))
    assert values_match({"a": [True]}, {"a": [True]})
    assert not values_match(True, 1) and not values_match(1, True)
    assert not values_match([1, 2], [2, 1])


# ------------------------------------------------------------------ bundled data
def test_bundled_problems_and_rows():
    problems = load_bundled_problems()
    train, test = load_bundled_problems("train"), load_bundled_problems("test")
    assert len(problems) >= 20 and len(train) + len(test) == len(problems) and test
    assert len({p.id for p in problems}) == len(problems)
    assert {p.id for p in train}.isdisjoint(p.id for p in test)
    assert all(len(p.tests) >= 3 for p in problems)
    assert {t.kind for p in problems for t in p.tests} == {TestKind.STDIN, TestKind.FUNCTIONAL}
    rows = load_bundled_rows("train")
    assert [r["id"] for r in rows] == [p.id for p in train]
    for row, p in zip(rows, train, strict=True):
        assert p.reference not in json.dumps(row)  # reference solutions never reach a row
        assert row["reward_spec"]["ground_truth"] not in json.dumps(row["prompt"])
        assert len(
            parse_tests(row["reward_spec"]["ground_truth"], func_name=row["reward_spec"].get("func_name"))
        ) == len(p.tests)
    mt = load_bundled_rows("test", env_class="code_multi_turn")
    assert "python tool" in mt[0]["prompt"][0]["content"] and mt[0]["env_class"] == "code_multi_turn"
    with pytest.raises(ValueError, match="unknown split"):
        load_bundled_rows("dev")


def test_every_reference_scores_one_and_wrong_programs_score_zero():
    for split in ("train", "test"):
        for row in load_bundled_rows(split):
            extras = {"reward_spec": row["reward_spec"]}
            out, metrics = run(reference_of(row["id"]), extras)
            assert out.reward == 1.0 and out.done, (row["id"], out.metadata)
            assert metrics["solved"] and metrics["tests_passed"] == 1.0
            assert all(t["passed"] for t in out.metadata["tests"])
            wrong = (
                "print(0)" if "func_name" not in row["reward_spec"] else "def unrelated():\n    return None"
            )
            out, metrics = run(wrong, extras)
            assert out.reward == 0.0 and not metrics["solved"], row["id"]


def test_partial_solution_reports_each_test():
    # Kadane's algorithm started at 0 fails only on an all-negative array.
    code = "input()\nbest = cur = 0\nfor x in map(int, input().split()):\n    cur = max(0, cur + x)\n    best = max(best, cur)\nprint(best)"
    row = next(r for r in load_bundled_rows("train") if r["id"] == "max-subarray")
    extras = {"reward_spec": row["reward_spec"]}
    out, metrics = run(code, extras, stop_at_first_failure=False)
    assert out.reward == 0.0
    assert [t["passed"] for t in out.metadata["tests"]] == [True, False, True]
    assert out.metadata["tests"][1]["error"] == "wrong_answer" and out.metadata["tests"][1]["output"] == "0\n"
    assert metrics["tests_passed"] == pytest.approx(2 / 3)
    out, metrics = run(code, extras)  # stop at the first failure (the default)
    assert [t["error"] for t in out.metadata["tests"]] == [None, "wrong_answer", "not_run"]
    assert metrics["tests_passed"] == pytest.approx(1 / 3)


def test_functional_tests_accept_top_level_functions_and_solution_methods():
    gt = [
        {
            "input": "[3, 1, 2]",
            "output": "[1, 2, 3]",
            "testtype": "functional",
            "metadata": {"func_name": "srt"},
        },
        {"input": "[]", "output": "[]", "testtype": "functional", "metadata": {"func_name": "srt"}},
    ]
    extras = {"reward_spec": {"ground_truth": json.dumps(gt)}}
    assert run("def srt(xs):\n    return tuple(sorted(xs))", extras)[0].reward == 1.0
    assert run("class Solution:\n    def srt(self, xs):\n        return sorted(xs)", extras)[0].reward == 1.0
    # prints go to stderr, not into the result channel: printing the answer is not returning it
    out, _ = run('print(\'{"status": "ok", "value": [1, 2, 3]}\')', extras)
    assert out.reward == 0.0 and out.metadata["tests"][0]["error"] == FailKind.NO_FUNCTION
    out, _ = run("def srt(xs):\n    return {1, 2, 3}", extras)
    assert out.metadata["tests"][0]["error"] == "bad_return"
    out, _ = run("def srt(xs):\n    raise KeyError('boom')", extras)
    assert (
        out.metadata["tests"][0]["error"] == "runtime_error"
        and "KeyError" in out.metadata["tests"][0]["stderr"]
    )


def test_no_code_block_is_a_format_error_without_a_sandbox():
    env = make(stdin_row([("1\n", "1\n")]))
    out = env.step("I would read the number and print it.")
    assert out.reward == 0.0 and out.done and out.metadata["error"] == "format"
    assert env.get_metrics()["format_error"] and env._sandbox is None
    env.close()


def test_compile_error_runs_nothing():
    env = make(stdin_row([("1\n", "1\n")]))
    out = env.step(block("def f(:\n    pass"))
    assert (
        out.reward == 0.0
        and out.metadata["error"] == "compile_error"
        and "SyntaxError" in out.metadata["message"]
    )
    assert env.get_metrics()["compile_error"] and env._sandbox is None
    assert out.metadata["tests"][0]["error"] == "not_run"
    env.close()


def test_close_is_idempotent_and_removes_the_sandbox():
    env = make(stdin_row([("2\n", "4\n")]))
    assert env.step(block("print(int(input()) * 2)")).reward == 1.0
    workdir = env._sandbox.workdir
    assert os.path.isdir(workdir)
    env.close()
    env.close()
    assert not os.path.exists(workdir)
    with pytest.raises(ConfigError, match="closed"):
        env.sandbox  # noqa: B018


def test_config_comes_from_env_config_and_extras():
    env = make(
        {**stdin_row([("1", "1")]), "test_timeout_s": 2.5}, test_timeout_s=4, stop_at_first_failure=False
    )
    assert env.config.test_timeout_s == 2.5 and env.config.stop_at_first_failure is False
    env.close()
    env = skyrl_gym.make("code", env_config=ConfigView({"memory_mb": 256}), extras=stdin_row([("1", "1")]))
    assert env.config.memory_mb == 256 and env.config.test_timeout_s == 6.0
    env.close()
    with pytest.raises(ConfigError, match="'local' or 'docker'"):
        make(stdin_row([("1", "1")]), sandbox="ssh")
    with pytest.raises(ConfigError, match="test_timeout_s"):
        CodeEnvConfig(test_timeout_s=0)
    with pytest.raises(ConfigError, match="needs sandbox='docker'"):
        CodeEnvConfig(pool_size=2)


# ------------------------------------------------------------------ adversarial programs
def test_infinite_loop_times_out_per_test():
    extras = stdin_row([("1\n", "1\n"), ("2\n", "2\n")])
    start = time.monotonic()
    out, metrics = run("while True:\n    pass", extras, test_timeout_s=1.0)
    elapsed = time.monotonic() - start
    assert out.reward == 0.0 and metrics["timeout"]
    assert out.metadata["tests"][0]["timed_out"] and out.metadata["tests"][0]["error"] == "timeout"
    assert elapsed < 1.0 + 2.0, elapsed  # deadline plus a small margin (one test ran)


def test_sigterm_ignoring_loop_is_killed_after_the_grace():
    code = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass"
    start = time.monotonic()
    out, _ = run(code, stdin_row([("1\n", "1\n")]), test_timeout_s=1.0)
    assert out.metadata["tests"][0]["timed_out"]
    assert time.monotonic() - start < 1.0 + 0.5 + 2.0


def test_overall_deadline_stops_grading():
    extras = stdin_row([("1\n", "1\n")] * 4)
    start = time.monotonic()
    out, metrics = run(
        "import time\ntime.sleep(30)",
        extras,
        test_timeout_s=1.0,
        total_timeout_s=1.5,
        stop_at_first_failure=False,
    )
    elapsed = time.monotonic() - start
    errors = [t["error"] for t in out.metadata["tests"]]
    assert errors[:2] == ["timeout", "timeout"] and set(errors[2:]) == {"not_run"}
    assert out.metadata["error"] == "overall_timeout" and metrics["timeout"] and out.reward == 0.0
    assert elapsed < 1.5 + 2.0, elapsed


def test_fork_bomb_is_contained():
    from skyrl_gym.sandbox.local import _pids_where

    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    env = make(stdin_row([("1\n", "1\n")]), test_timeout_s=2.0, pids=32)
    start = time.monotonic()
    out = env.step(block(code))
    assert out.reward == 0.0 and time.monotonic() - start < 2.0 + 3.0
    sandbox = env._sandbox
    if sandbox.uid is not None:  # every process of the sandbox's own uid is gone
        assert _pids_where(uid=sandbox.uid) == []
    # the host and the sandbox still work afterwards
    assert sandbox.exec(["python3", "-c", "print('alive')"]).stdout == "alive\n"
    env.close()


@pytest.mark.parametrize(
    "code",
    [
        "x = bytearray(8 * 1024 ** 3)\nprint(len(x))",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 ** 2))",
    ],
)
def test_memory_bomb_is_contained(code):
    out, _ = run(code, stdin_row([("1\n", "1\n")]), memory_mb=256)
    assert out.reward == 0.0
    assert out.metadata["tests"][0]["error"] == "memory", out.metadata


def test_huge_output_is_truncated():
    out, _ = run("import sys\nsys.stdout.write('x' * 20_000_000)", stdin_row([("1\n", "1\n")]))
    test = out.metadata["tests"][0]
    assert out.reward == 0.0 and test["error"] == "output_limit"
    assert len(test["output"]) <= 300 and len(json.dumps(out.metadata)) < 5000


def test_program_cannot_read_the_expected_outputs():
    secret = f"skyrl-secret-{secrets.token_hex(8)}"
    extras = stdin_row([("probe\n", secret + "\n"), ("probe2\n", secret + "x\n")])
    code = r"""
import os, sys, glob
print(sorted(os.listdir('.')))
found = []
marker = b'skyrl-' + b'secret-'  # built at run time so the program's own source does not match
for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):
    try:
        data = open(path, 'rb').read()
    except OSError:
        continue
    if marker in data:
        found.append(data[:200])
for root in ('.', '/tmp', os.path.expanduser('~')):
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                data = open(os.path.join(dirpath, f), 'rb').read(10**6)
            except OSError:
                continue
            if marker in data:
                found.append(data[:200])
print('FOUND', found, flush=True)
os.system('env; ls -la; ls /tmp; cat /proc/1/environ')
"""
    env = make(extras, stop_at_first_failure=False)
    env.sandbox.write_file("decoy.txt", "skyrl-secret-decoy")  # positive control: the scan works
    out = env.step(block(code))
    env.close()
    assert out.reward == 0.0
    for test in out.metadata["tests"]:
        assert test["error"] == "wrong_answer", test
        assert secret not in test["output"]
        # only the program itself is in its directory (no test file); the scan finds only the decoy
        listing, found = test["output"].split("\n")[:2]
        assert listing == "['solution.py']" and found.startswith("FOUND [b'skyrl-secret-decoy'"), test[
            "output"
        ]
        assert "skyrl-secret-" not in found.replace("b'skyrl-secret-decoy'", "")


# ------------------------------------------------------------------ multi-turn
def call(code: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'python', 'arguments': {'code': code}})}</tool_call>"


def multi(**config):
    row = next(r for r in load_bundled_rows("train", env_class="code_multi_turn") if r["id"] == "gcd-lcm")
    return make({"reward_spec": row["reward_spec"]}, "code_multi_turn", **config), reference_of("gcd-lcm")


def test_multi_turn_tool_then_answer():
    env, ref = multi()
    assert env.max_turns == 4 and [s["function"]["name"] for s in env.tool_specs()] == ["python"]
    out = env.step("Let me check.\n" + call("import math\nprint(math.gcd(12, 18))"))
    assert not out.done and out.reward == 0.0
    assert out.observations[0]["content"].startswith("<tool_response>6</tool_response>")
    assert "3 turns left" in out.observations[0]["content"]
    # a turn with a tool call is not final even when it also holds a code block
    out = env.step(block("print(1)") + call("print(2 ** 10)"))
    assert not out.done and "1024" in out.observations[0]["content"]
    out = env.step(block(ref))
    assert out.done and out.reward == 1.0 and out.truncated is False
    assert env.get_metrics() == {
        "solved": True,
        "tests_passed": 1.0,
        "compile_error": False,
        "timeout": False,
        "format_error": False,
        "tool_calls": 2,
        "answered": True,
    }
    env.close()


def test_multi_turn_tool_errors_and_deadlines_are_observations():
    env, _ = multi(tool_timeout_s=1.0, max_turns=5)
    out = env.step(call("while True: pass"))
    assert "[timed out after 1 s" in out.observations[0]["content"] and not out.done
    out = env.step(call("raise ValueError('nope')"))
    assert "ValueError: nope" in out.observations[0]["content"]
    out = env.step('<tool_call>{"name": "pyhton", "arguments": {"code": "1"}}</tool_call>')
    assert out.metadata["tool_calls"][0]["error"] == "unknown_tool" and not out.done
    out = env.step("I am thinking.")
    assert out.metadata["error"] == "format" and "```python" in out.observations[0]["content"]
    env.close()


def test_multi_turn_ends_at_max_turns_without_an_answer():
    env, _ = multi(max_turns=2)
    assert not env.step(call("print(1)")).done
    out = env.step(call("print(2)"))
    assert out.done and out.truncated and out.reward == 0.0 and out.observations == []
    assert not env.get_metrics()["answered"] and not env.get_metrics()["solved"]
    env.close()


def test_multi_turn_wrong_final_answer_scores_zero():
    env, _ = multi()
    out = env.step(block("print(1, 1)"))
    assert out.done and out.reward == 0.0 and out.metadata["tests"][0]["error"] == "wrong_answer"
    env.close()


def test_readme_example_runs(capsys):
    from tests.docs._markdown import example_after

    block = example_after("docs/guides/envs.md", "## Code envs (`code`, `code_multi_turn`)")
    exec(compile(block.code, block.where, "exec"), {"__name__": "readme_example"})
    assert capsys.readouterr().out == "1.0 3 True\n"
