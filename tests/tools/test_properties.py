"""Property tests: no parser and no executor path raises, whatever the model writes."""

import asyncio
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyrl_gym.tools import (
    ErrorKind,
    ParseResult,
    ToolExecutor,
    ToolResult,
    get_parser,
    list_parsers,
    tool,
)

CAP = 2_000


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def echo(text: str, times: int = 1) -> str:
    """Repeat the text."""
    return text * max(0, min(times, 3))


@tool
def boom(reason: str = "") -> str:
    """Always fails."""
    raise RuntimeError(reason)


@tool
async def aecho(value: dict | list | str | None = None) -> dict:
    """Echo any JSON value back, asynchronously."""
    return {"value": value}


TOOLS = [add, echo, boom, aecho]
EXECUTOR = ToolExecutor(TOOLS, timeout=5.0, max_observation_chars=CAP)
PARSERS = [
    get_parser(name, tags={"sql": ("echo", "text"), "python": ("add", "a")})
    if name == "xml"
    else get_parser(name)
    for name in list_parsers()
]

# ------------------------------------------------------------------------------ strategies
# fmt: off
FRAGMENTS = [
    "<tool_call>", "</tool_call>", "<sql>", "</sql>", "<python>", "</python>", "<function=", "<function=add>",
    "<function=echo>", "</function>", "<parameter=", "<parameter=a>", "<parameter=text>", "</parameter>", ">",
    "{", "}", "[", "]", '"name"', '"arguments"', '"parameters"', ":", ",", '"add"', '"echo"', '"a"', '"b"',
    "1", "-0.5e3", "null", "true", '"', "\\", "\\u00", "```json", "```", "\n", "\x00", "\ud800", "\u202e",
]
# fmt: on
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
names = st.sampled_from(["add", "echo", "boom", "aecho", "ad", "", "ECHO"]) | json_values
arguments = (
    st.dictionaries(
        st.sampled_from(["a", "b", "text", "times", "reason", "value", "zzz"]), json_values, max_size=4
    )
    | json_values
)
call_objects = st.fixed_dictionaries(
    {"name": names, "arguments": arguments | arguments.map(lambda a: json.dumps(a))}
)
tag_soup = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=12), max_size=40).map("".join)


@st.composite
def hermes_turns(draw) -> str:
    """Well-formed or truncated ``<tool_call>`` turns around JSON calls."""
    parts = []
    for obj in draw(st.lists(call_objects | json_values, max_size=4)):
        body = json.dumps(obj)
        block = f"<tool_call>{body}</tool_call>"
        parts.append(block[: draw(st.integers(0, len(block)))] if draw(st.booleans()) else block)
        parts.append(draw(st.text(max_size=10)))
    return "".join(parts)


@st.composite
def huge_turns(draw) -> str:
    n = draw(st.integers(10_000, 200_000))
    kind = draw(st.sampled_from(["hermes", "sql", "function", "nested", "nul", "repeat"]))
    if kind == "repeat":  # degenerate repetition of a tag or a call
        unit = draw(
            st.sampled_from(
                FRAGMENTS + ['<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>']
            )
        )
        return unit * (n // max(1, len(unit)))
    if kind == "hermes":
        return json.dumps({"name": "echo", "arguments": {"text": "x" * n, "times": 3}}).join(
            ["<tool_call>", "</tool_call>"]
        )
    if kind == "sql":
        return "<sql>" + "y" * n + "</sql>"
    if kind == "function":
        return "<function=echo><parameter=text>" + "z" * n + "</parameter></function>"
    if kind == "nested":
        return "<tool_call>" + '{"a": ' * (n // 10) + "</tool_call>"
    return "\x00" * n


@st.composite
def openai_messages(draw) -> dict:
    calls = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "id": st.text(max_size=6) | json_values,
                    "type": st.just("function"),
                    "function": call_objects | json_values,
                }
            )
            | json_values,
            max_size=4,
        )
    )
    return {
        "role": "assistant",
        "content": draw(st.none() | tag_soup),
        "tool_calls": draw(st.just(calls) | json_values),
    }


any_text = st.text(alphabet=st.characters(blacklist_categories=()), max_size=200)
turns = st.one_of(
    any_text, tag_soup, hermes_turns(), huge_turns(), openai_messages(), openai_messages().map(json.dumps)
)


def check_results(results: list[ToolResult], parsed: ParseResult) -> None:
    found = len(parsed.calls) + len(parsed.errors)
    assert len(results) == (found if found <= EXECUTOR.max_calls else EXECUTOR.max_calls + 1)
    for r in results:
        assert isinstance(r, ToolResult) and isinstance(r.content, str) and len(r.content) <= CAP
        assert r.error is None or isinstance(r.error, ErrorKind)
        message = r.to_message()
        assert message["role"] == "tool" and isinstance(message["tool_call_id"], str)


@settings(
    max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(turn=turns)
def test_parsers_and_executor_never_raise(turn):
    for parser in PARSERS:
        parsed = parser.parse(turn)
        assert isinstance(parsed, ParseResult)
        check_results(EXECUTOR.execute(parsed), parsed)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(turn=st.one_of(tag_soup, hermes_turns(), openai_messages()))
def test_async_executor_never_raises(turn):
    async def main():
        out = []
        for parser in PARSERS:
            parsed = parser.parse(turn)
            out.append((await EXECUTOR.aexecute(parsed), parsed))
        return out

    for results, parsed in asyncio.run(main()):
        check_results(results, parsed)
