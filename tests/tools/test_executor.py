"""The executor: every model mistake becomes a categorized, helpful result; deadlines hold."""

import asyncio
import sqlite3
import threading
import time

import pytest

import skyrl_gym
from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.errors import ConfigError, InfrastructureError, SandboxError, ToolDefinitionError
from skyrl_gym.tools import (
    ErrorKind,
    ParseError,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolGroup,
    ToolResult,
    acall_tools,
    call_tools,
    get_parser,
    tool,
    truncate_middle,
)

MARGIN_S = 0.5  # how late a timed-out call may come back


class Calc(ToolGroup):
    def __init__(self) -> None:
        super().__init__(name="calc")
        self.release = threading.Event()  # lets the runaway sleeper finish after a test

    @tool
    def add(self, a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @tool
    def divide(self, a: float, b: float) -> float:
        """Divide a by b."""
        return a / b

    @tool(timeout=0.3)
    def sleepy(self, seconds: float) -> str:
        """Sleep (a tool with its own deadline)."""
        self.release.wait(seconds)
        return "awake"

    @tool(timeout=0.3)
    async def asleepy(self, seconds: float) -> str:
        """Sleep asynchronously."""
        await asyncio.sleep(seconds)
        return "awake"

    @tool
    def big(self, n: int) -> str:
        """Return n characters."""
        return "ab" * (n // 2)

    @tool
    def info(self, ctx: ToolContext) -> dict:
        """Report the context."""
        return {"env": ctx.env, "call": ctx.call.id, "timeout": ctx.timeout}


def hermes(*calls: str) -> str:
    return "".join(f"<tool_call>{c}</tool_call>" for c in calls)


@pytest.fixture
def calc():
    group = Calc()
    yield group
    group.release.set()


def run(calc, text, **kw):
    return call_tools([calc], text, **kw)


def test_a_good_call_returns_the_value_as_text_and_a_tool_message(calc):
    (r,) = run(calc, hermes('{"name": "add", "arguments": {"a": 2, "b": "3"}}'))
    assert r.ok and r.error is None and r.value == 5 and r.content == "5"
    assert r.to_message() == {"role": "tool", "tool_call_id": "call_0", "name": "add", "content": "5"}
    assert r.to_message("user") == {"role": "user", "content": "5"}
    (r,) = run(calc, hermes('{"name": "info", "arguments": {}}'))
    assert r.content == '{"env": null, "call": "call_0", "timeout": 30.0}'


def test_parse_error(calc):
    (r,) = run(calc, hermes("{not json"))
    assert r.error is ErrorKind.PARSE_ERROR and r.error == "parse_error"
    assert r.content.startswith("Could not parse the tool call: invalid JSON")
    assert r.to_message()["role"] == "tool" and r.to_message()["tool_call_id"] == "call_0"


def test_unknown_tool_lists_tools_and_suggests(calc):
    (r,) = run(calc, hermes('{"name": "ad", "arguments": {}}'))
    assert r.error is ErrorKind.UNKNOWN_TOOL
    assert r.content == (
        "Unknown tool 'ad'. Did you mean 'add'? Available tools: add, divide, sleepy, asleepy, big, info."
    )
    (r,) = call_tools([], hermes('{"name": "ad", "arguments": {}}'))
    assert r.content == "Unknown tool 'ad': no tools are available here."


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ('{"a": 1}', "missing required argument 'b'"),
        (
            '{"a": "one", "b": 2}',
            "'a': Input should be a valid integer, unable to parse string as an integer (got 'one')",
        ),
        ('{"a": 1, "b": 2, "c": 3}', "unexpected argument 'c'"),
        ('{"a": 1.5, "b": 2}', "'a': Input should be a valid integer, got a number with a fractional part"),
    ],
)
def test_invalid_arguments_say_what_is_wrong_and_what_is_expected(calc, arguments, fragment):
    (r,) = run(calc, hermes(f'{{"name": "add", "arguments": {arguments}}}'))
    assert r.error is ErrorKind.INVALID_ARGUMENTS
    assert r.content.startswith("Invalid arguments for tool 'add': ")
    assert fragment in r.content
    assert r.content.endswith("Expected parameters: a (integer, required), b (integer, required).")


def test_arguments_that_are_not_an_object(calc):
    (r,) = ToolExecutor([calc]).execute(ToolCall(name="add", arguments=[1, 2]))
    assert r.error is ErrorKind.INVALID_ARGUMENTS and "must be a JSON object" in r.content


def test_tool_error_reports_the_exception(calc):
    (r,) = run(calc, hermes('{"name": "divide", "arguments": {"a": 1, "b": 0}}'))
    assert r.error is ErrorKind.TOOL_ERROR
    assert r.content == "Tool 'divide' failed: ZeroDivisionError: float division by zero"


def test_a_tool_that_calls_exit_is_a_tool_error():
    @tool
    def quit_now() -> str:
        raise SystemExit(3)

    (r,) = ToolExecutor([quit_now]).execute(ToolCall(name="quit_now"))
    assert r.error is ErrorKind.TOOL_ERROR and "SystemExit: 3" in r.content


class Broken(ToolGroup):
    """Tools whose infrastructure fails, and one whose user errs."""

    def __init__(self) -> None:
        super().__init__(name="broken")
        self.ran: list[str] = []

    @tool(timeout=None)
    def inline(self) -> str:
        """Fail on the caller's thread."""
        self.ran.append("inline")
        raise SandboxError("sandbox container x is gone (killed or reaped)")

    @tool(timeout=5)
    def threaded(self) -> str:
        """Fail in a worker thread (a tool with a deadline)."""
        self.ran.append("threaded")
        raise InfrastructureError("the retrieval server is down")

    @tool(timeout=5)
    async def coroutine(self) -> str:
        """Fail as a coroutine."""
        self.ran.append("coroutine")
        raise SandboxError("the Docker daemon went away")

    @tool
    def mistake(self) -> str:
        """A file the model named is missing: its error to see."""
        self.ran.append("mistake")
        raise FileNotFoundError("no file 'x'")


@pytest.mark.parametrize("name", ["inline", "threaded", "coroutine"])
def test_an_infrastructure_error_raises_through_execute_and_aexecute(name):
    group = Broken()
    turn = hermes('{"name": "mistake", "arguments": {}}', f'{{"name": "{name}", "arguments": {{}}}}')
    turn += hermes('{"name": "mistake", "arguments": {}}')
    with pytest.raises(InfrastructureError) as info:
        call_tools([group], turn)
    assert type(info.value) is (InfrastructureError if name == "threaded" else SandboxError)
    assert group.ran == ["mistake", name]  # the calls after it did not run
    group.ran.clear()
    with pytest.raises(InfrastructureError):
        asyncio.run(acall_tools([group], turn))
    assert group.ran == ["mistake", name]
    (r,) = call_tools([group], hermes('{"name": "mistake", "arguments": {}}'))
    assert (
        r.error is ErrorKind.TOOL_ERROR
        and r.content == "Tool 'mistake' failed: FileNotFoundError: no file 'x'"
    )


def test_an_infrastructure_error_raises_out_of_env_step():
    class Env(BaseTextEnv):
        def __init__(self) -> None:
            super().__init__()
            self.init_tool_groups([Broken()])

        def step(self, action: str) -> BaseTextEnvStepOutput:
            results = self.call_tools(action, timeout=None)
            return BaseTextEnvStepOutput(
                observations=[r.to_message() for r in results], reward=0.0, done=False
            )

    with pytest.raises(SandboxError, match="gone"):
        Env().step(hermes('{"name": "inline", "arguments": {}}'))


def test_sync_tool_times_out_within_deadline_plus_margin(calc):
    start = time.perf_counter()
    (r,) = run(calc, hermes('{"name": "sleepy", "arguments": {"seconds": 30}}'))
    elapsed = time.perf_counter() - start
    assert r.error is ErrorKind.TIMEOUT
    assert r.content == (
        "Tool 'sleepy' did not finish within its 0.3 s time limit; its result is discarded. "
        "Try a smaller or faster call."
    )
    assert 0.3 <= elapsed < 0.3 + MARGIN_S
    # A quick call of the same tool still works.
    (r,) = run(calc, hermes('{"name": "sleepy", "arguments": {"seconds": 0}}'))
    assert r.ok and r.content == "awake"


def test_async_tool_times_out_and_is_cancelled(calc):
    start = time.perf_counter()
    (r,) = run(calc, hermes('{"name": "asleepy", "arguments": {"seconds": 30}}'))
    assert r.error is ErrorKind.TIMEOUT
    assert time.perf_counter() - start < 0.3 + MARGIN_S


def test_executor_default_deadline_applies_to_tools_without_their_own():
    gate = threading.Event()

    @tool
    def wait(seconds: float) -> str:
        gate.wait(seconds)
        return "done"

    try:
        start = time.perf_counter()
        (r,) = ToolExecutor([wait], timeout=0.2).execute(ToolCall(name="wait", arguments={"seconds": 30}))
        assert r.error is ErrorKind.TIMEOUT and "0.2 s" in r.content
        assert time.perf_counter() - start < 0.2 + MARGIN_S
    finally:
        gate.set()


def test_timeout_none_runs_on_the_callers_thread_so_sqlite_works():
    conn = sqlite3.connect(":memory:")  # sqlite3 objects only work on the thread that made them
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])

    @tool(timeout=None)
    def run_sql(query: str) -> list:
        """Run a read-only SQL query."""
        return [list(row) for row in conn.execute(query).fetchall()]

    @tool
    def run_sql_threaded(query: str) -> list:
        return [list(row) for row in conn.execute(query).fetchall()]

    results = call_tools(
        [run_sql, run_sql_threaded],
        "<sql>SELECT sum(x) FROM t</sql><sql>SELEC</sql>",
        get_parser("xml", tags={"sql": ("run_sql", "query")}),
    )
    assert [(r.error, r.content) for r in results] == [
        (None, "[[6]]"),
        (ErrorKind.TOOL_ERROR, "Tool 'run_sql' failed: OperationalError: near \"SELEC\": syntax error"),
    ]
    (r,) = call_tools(
        [run_sql_threaded], '<tool_call>{"name": "run_sql_threaded", "arguments": {"query": "SELECT 1"}}'
    )
    assert r.error is ErrorKind.TOOL_ERROR and "ProgrammingError" in r.content  # the documented reason
    conn.close()


def test_several_calls_in_one_turn_keep_order_with_parse_errors_between(calc):
    text = hermes(
        '{"name": "add", "arguments": {"a": 1, "b": 1}}',
        "{broken",
        '{"name": "nope", "arguments": {}}',
        '{"name": "add", "arguments": {"a": 2, "b": 2}}',
    )
    results = run(calc, text)
    assert [(r.id, r.error, r.content[:7]) for r in results] == [
        ("call_0", None, "2"),
        ("call_1", ErrorKind.PARSE_ERROR, "Could n"),
        ("call_2", ErrorKind.UNKNOWN_TOOL, "Unknown"),
        ("call_3", None, "4"),
    ]


def test_text_values_are_read_as_json_for_non_string_parameters(calc):
    text = "<function=add><parameter=a>2</parameter><parameter=b>40</parameter></function>"
    (r,) = run(calc, text, parser="function")
    assert r.ok and r.value == 42

    @tool
    def total(xs: list[int], label: str) -> str:
        return f"{label}={sum(xs)}"

    (r,) = call_tools(
        [total],
        "<function=total><parameter=xs>[1, 2, 3]</parameter><parameter=label>123</parameter></function>",
        "function",
    )
    assert r.ok and r.content == "123=6"  # label stays the text "123"
    (r,) = call_tools(
        [total],
        "<function=total><parameter=xs>oops</parameter><parameter=label>x</parameter></function>",
        "function",
    )
    assert r.error is ErrorKind.INVALID_ARGUMENTS and "'xs': Input should be a valid list" in r.content


def test_observations_are_capped_with_a_middle_marker(calc):
    (r,) = run(calc, hermes('{"name": "big", "arguments": {"n": 100000}}'))
    assert r.ok and r.truncated and len(r.content) == 16_000
    assert r.content.startswith("abab") and r.content.endswith("abab")
    assert "[... 84" in r.content and "characters truncated ...]" in r.content
    (r,) = ToolExecutor([calc], max_observation_chars=200).execute(ToolCall(name="big", arguments={"n": 150}))
    assert not r.truncated and len(r.content) == 150


@pytest.mark.parametrize("n", [0, 1, 99, 100, 101, 1000, 123_456])
def test_truncate_middle_never_exceeds_the_limit(n):
    text = "x" * n
    out, cut = truncate_middle(text, 100)
    assert len(out) <= 100 and cut == (n > 100)
    if cut:
        shown = int(out.split("[... ")[1].split(" ")[0])
        assert out.count("x") == n - shown  # the marker counts exactly what was cut


def test_aexecute_runs_sync_and_async_tools_with_deadlines(calc):
    async def main():
        start = time.perf_counter()
        results = await acall_tools(
            [calc],
            hermes(
                '{"name": "add", "arguments": {"a": 1, "b": 2}}',
                '{"name": "asleepy", "arguments": {"seconds": 0.01}}',
                '{"name": "sleepy", "arguments": {"seconds": 30}}',
                '{"name": "asleepy", "arguments": {"seconds": 30}}',
                "{bad",
            ),
            context=ToolContext(env="async-env"),
        )
        return results, time.perf_counter() - start

    results, elapsed = asyncio.run(main())
    assert [r.error for r in results] == [
        None,
        None,
        ErrorKind.TIMEOUT,
        ErrorKind.TIMEOUT,
        ErrorKind.PARSE_ERROR,
    ]
    assert results[0].content == "3" and results[1].content == "awake"
    assert elapsed < 0.6 + 2 * MARGIN_S


def test_sync_execute_from_inside_a_running_event_loop(calc):
    async def main():
        return call_tools([calc], hermes('{"name": "asleepy", "arguments": {"seconds": 0.01}}'))

    (r,) = asyncio.run(main())
    assert r.ok and r.content == "awake"


def test_executor_rejects_developer_mistakes():
    @tool
    def add(a: int) -> int:
        return a

    with pytest.raises(ToolDefinitionError, match="provided by both"):
        ToolExecutor([Calc(), add])
    with pytest.raises(ToolDefinitionError, match="ToolGroups and @tool functions"):
        ToolExecutor(["add"])
    with pytest.raises(ConfigError, match="timeout"):
        ToolExecutor([], timeout=-1)
    with pytest.raises(ConfigError, match="max_observation_chars"):
        ToolExecutor([], max_observation_chars=10)
    with pytest.raises(ConfigError, match="Did you mean 'hermes'"):
        call_tools([], "x", parser="hermse")


def test_too_many_calls_in_one_turn_are_cut_to_one_result(calc):
    text = hermes(*['{"name": "add", "arguments": {"a": 1, "b": 1}}'] * 5) + "<tool_call>{oops</tool_call>"
    results = call_tools([calc], text, max_calls=3)
    assert [r.error for r in results] == [None, None, None, ErrorKind.TOO_MANY_CALLS]
    assert results[3].id == "call_3" and results[3].name == "add"
    assert results[3].content == (
        "This turn has 6 tool calls; only the first 3 were handled and the rest were not run. "
        "Make at most 3 tool calls per turn."
    )
    with pytest.raises(ConfigError, match="max_calls"):
        ToolExecutor([calc], max_calls=0)


def test_degenerate_repetition_stays_bounded(calc):
    results = run(calc, "<tool_call>" * 200_000)  # parsed in linear time, answered in 33 results
    assert len(results) == 33
    assert {r.error for r in results[:32]} == {ErrorKind.PARSE_ERROR}
    assert results[32].error is ErrorKind.TOO_MANY_CALLS and "has 200000 tool calls" in results[32].content


def test_parse_errors_and_calls_can_be_passed_directly():
    results = ToolExecutor([]).execute(
        [ParseError("bad", id="x", position=5), ToolCall(name="a", id="y", position=1)]
    )
    assert [(r.id, r.error) for r in results] == [("y", ErrorKind.UNKNOWN_TOOL), ("x", ErrorKind.PARSE_ERROR)]
    assert isinstance(results[0], ToolResult)


# ------------------------------------------------------------------------------ through a real env
class CalcEnv(BaseTextEnv):
    """Multiply with a tool, then answer in <answer>...</answer>."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.max_turns = 3
        self.init_tool_groups([Calc()])

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        results = self.call_tools(action, timeout=5.0)
        done = self.turns >= self.max_turns
        if results:
            errors = [r.error for r in results if r.error]
            return BaseTextEnvStepOutput(
                observations=[r.to_message() for r in results],
                reward=0.0,
                done=done,
                metadata={"error": errors[0] if errors else None},
            )
        solved = "<answer>5</answer>" in action
        return BaseTextEnvStepOutput(
            observations=[] if solved else [{"role": "user", "content": "Call a tool or answer."}],
            reward=float(solved),
            done=solved or done,
        )

    def close(self) -> None:
        for group in self.tool_groups:
            group.release.set()


def test_env_call_tools_and_check_env_with_garbage_actions():
    env = CalcEnv()
    out = env.step(
        hermes('{"name": "add", "arguments": {"a": 2, "b": 3}}', '{"name": "info", "arguments": {}}')
    )
    assert out.observations[0] == {"role": "tool", "tool_call_id": "call_0", "name": "add", "content": "5"}
    assert out.observations[1]["content"] == '{"env": "<CalcEnv instance>", "call": "call_1", "timeout": 5.0}'
    assert env.tool_specs()[0]["function"]["name"] == "add"
    out = env.step(hermes('{"name": "add", "arguments": {"a": 2}}'))
    assert out.metadata["error"] == "invalid_arguments"
    env.close()
    skyrl_gym.register("test-calc-tools", CalcEnv)
    try:
        report = skyrl_gym.check_env(
            lambda: skyrl_gym.make("test-calc-tools"),
            good_actions=[hermes('{"name": "add", "arguments": {"a": 2, "b": 3}}'), "<answer>5</answer>"],
        )
        assert "good actions earn reward" in report.checks
    finally:
        skyrl_gym.deregister("test-calc-tools")
