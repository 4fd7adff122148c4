"""Tool-call parsers: each format on valid and broken turns, and the registry."""

import json

import pytest

from skyrl_gym.errors import ConfigError, RegistrationError
from skyrl_gym.tools import (
    FunctionTagParser,
    HermesParser,
    OpenAIParser,
    ParseResult,
    ToolCall,
    ToolCallParser,
    XmlTagParser,
    get_parser,
    list_parsers,
    register_parser,
)
from skyrl_gym.tools import parsers as parsers_mod


def calls_of(result: ParseResult) -> list[tuple[str, dict]]:
    return [(c.name, dict(c.arguments)) for c in result.calls]


# ------------------------------------------------------------------------------ Hermes
def test_hermes_several_calls_nested_json_and_string_arguments():
    text = (
        "Let me look.\n"
        '<tool_call>\n{"name": "search", "arguments": {"q": "a</b>", "filters": {"year": [2020, 2021], "deep": {"x": null}}}}\n</tool_call>\n'
        'and <tool_call>{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}</tool_call>'
        '<tool_call>{"name": "now"}</tool_call>'
    )
    result = get_parser("hermes").parse(text)
    assert result.errors == ()
    assert calls_of(result) == [
        ("search", {"q": "a</b>", "filters": {"year": [2020, 2021], "deep": {"x": None}}}),
        ("add", {"a": 1, "b": 2}),
        ("now", {}),
    ]
    assert [c.id for c in result.calls] == ["call_0", "call_1", "call_2"]
    assert result.calls[0].position < result.calls[1].position < result.calls[2].position


def test_hermes_accepts_message_dicts_code_fences_raw_newlines_parameters_key_and_lists():
    msg = {
        "role": "assistant",
        "content": '<tool_call>```json\n{"name": "run", "arguments": {"code": "a\nb"}}\n```</tool_call>',
    }
    assert calls_of(HermesParser().parse(msg)) == [("run", {"code": "a\nb"})]
    assert calls_of(HermesParser().parse('<tool_call>{"name": "f", "parameters": {"x": 1}}</tool_call>')) == [
        ("f", {"x": 1})
    ]
    both = HermesParser().parse('<tool_call>[{"name": "f"}, {"name": "g", "arguments": {}}]</tool_call>')
    assert calls_of(both) == [("f", {}), ("g", {})]
    # Generation stopped at the closing tag: a complete final call still counts.
    assert calls_of(HermesParser().parse('<tool_call>{"name": "f", "arguments": {"x": 1}}')) == [
        ("f", {"x": 1})
    ]
    assert get_parser("qwen").parse("no calls here") == ParseResult()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<tool_call>{not json</tool_call>", "invalid JSON"),
        ('<tool_call>{"name": "f", "arguments": {"x": 1}</tool_call>', "invalid JSON"),
        ('<tool_call>{"name": "f", "arguments": {}}}</tool_call>', "unexpected text after the JSON"),
        ("<tool_call></tool_call>", "it is empty"),
        ('<tool_call>{"name": 1, "arguments": []}</tool_call>', 'needs a "name" string'),
        ('<tool_call>{"arguments": {}}</tool_call>', 'needs a "name" string'),
        ('<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>', '"arguments" must be a JSON object'),
        (
            '<tool_call>{"name": "f", "arguments": "{broken"}</tool_call>',
            '"arguments" is a string but not a JSON object',
        ),
        ('<tool_call>"just a string"</tool_call>', "expected a JSON object"),
        ("<tool_call>[]</tool_call>", "empty list"),
        ('<tool_call>{"name": "f", "arguments": {"x": ', "not closed with </tool_call>"),
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "nested too deeply"),
    ],
)
def test_hermes_broken_calls_become_errors_with_the_format_hint(text, fragment):
    result = HermesParser().parse(text)
    assert result.calls == ()
    assert len(result.errors) == 1
    assert fragment in result.errors[0].message
    assert '<tool_call>{"name": "tool_name"' in result.errors[0].message
    assert len(result.errors[0].raw) <= 303


def test_hermes_mixture_of_good_and_broken_calls_keeps_order_and_ids():
    text = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
        "<tool_call>{oops}</tool_call>"
        '<tool_call>{"name": "b", "arguments": {}}'  # not closed, followed by another call
        '<tool_call>{"name": "c", "arguments": {}}</tool_call>'
    )
    result = HermesParser().parse(text)
    assert calls_of(result) == [("a", {}), ("b", {}), ("c", {})]
    assert [c.id for c in result.calls] == ["call_0", "call_2", "call_3"]
    assert [e.id for e in result.errors] == ["call_1"]


def test_hermes_closing_tag_inside_a_json_string():
    text = (
        '<tool_call>{"name": "py", "arguments": {"code": "print(\'</tool_call>\')"}}</tool_call>'
        '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    result = HermesParser().parse(text)
    assert result.errors == ()
    assert calls_of(result) == [("py", {"code": "print('</tool_call>')"}), ("b", {})]


# ------------------------------------------------------------------------------ XML tags
def test_xml_tags_map_to_tool_and_argument():
    parser = get_parser("xml", tags={"sql": ("run_sql", "query"), "python": ("run_python", "code")})
    text = (
        "Plan.\n<sql>\nSELECT * FROM t WHERE a < 3\n</sql> then <python>print('<sql>')</python><sql>SELECT 2"
    )
    result = parser.parse(text)
    assert result.errors == ()
    assert calls_of(result) == [
        ("run_sql", {"query": "SELECT * FROM t WHERE a < 3"}),
        ("run_python", {"code": "print('<sql>')"}),
        ("run_sql", {"query": "SELECT 2"}),  # stopped at the closing tag
    ]
    assert all(c.arguments_are_text for c in result.calls)
    assert parser.parse("<answer>42</answer> <SQL>x</SQL>") == ParseResult()


def test_xml_strict_closing_and_no_strip():
    parser = XmlTagParser({"sql": ("run_sql", "query")}, strip=False, allow_unclosed=False)
    assert calls_of(parser.parse("<sql> a </sql>")) == [("run_sql", {"query": " a "})]
    broken = parser.parse("<sql>SELECT 1")
    assert broken.calls == () and "not closed; end it with </sql>" in broken.errors[0].message
    assert broken.errors[0].name == "run_sql"


@pytest.mark.parametrize(
    "tags",
    [None, {}, {"bad tag": ("t", "a")}, {"sql": "run_sql"}, {"sql": ("run_sql",)}, {"sql": ("t", 1)}],
)
def test_xml_parser_configuration_errors(tags):
    with pytest.raises(ConfigError):
        get_parser("xml", tags=tags) if tags is not None else get_parser("xml")


# ------------------------------------------------------------------------------ OpenAI
def openai_message(*calls):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_abc{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ],
    }


def test_openai_tool_calls_from_message_json_text_list_and_sdk_objects():
    msg = openai_message(("add", json.dumps({"a": 1, "b": {"c": [1, 2]}})), ("now", ""), ("echo", {"t": "x"}))
    expected = [("add", {"a": 1, "b": {"c": [1, 2]}}), ("now", {}), ("echo", {"t": "x"})]
    result = get_parser("openai").parse(msg)
    assert calls_of(result) == expected and result.errors == ()
    assert [c.id for c in result.calls] == ["call_abc0", "call_abc1", "call_abc2"]
    assert calls_of(OpenAIParser().parse(json.dumps(msg))) == expected
    assert calls_of(OpenAIParser().parse(msg["tool_calls"])) == expected
    assert calls_of(OpenAIParser().parse(msg["tool_calls"][0])) == expected[:1]
    legacy = {"role": "assistant", "function_call": {"name": "add", "arguments": '{"a": 2}'}}
    assert calls_of(OpenAIParser().parse(legacy)) == [("add", {"a": 2})]

    class SDKMessage:
        def model_dump(self):
            return msg

    assert calls_of(OpenAIParser().parse(SDKMessage())) == expected
    assert OpenAIParser().parse({"role": "assistant", "content": "hi"}) == ParseResult()
    assert OpenAIParser().parse("The answer is 4.") == ParseResult()
    assert OpenAIParser().parse({"role": "assistant", "tool_calls": None}) == ParseResult()


def test_openai_broken_tool_calls():
    msg = {
        "tool_calls": [
            {"id": "c1", "function": {"name": "add", "arguments": '{"a": 1'}},
            {"id": "c2", "function": {"arguments": "{}"}},
            {"id": "c3"},
            "junk",
            {"id": "c5", "function": {"name": "ok", "arguments": "[1]"}},
            {"id": "c6", "function": {"name": "fine", "arguments": "{}"}},
        ]
    }
    result = OpenAIParser().parse(msg)
    assert calls_of(result) == [("fine", {})]
    assert [e.id for e in result.errors] == ["c1", "c2", "c3", "call_3", "c5"]
    assert "invalid JSON" in result.errors[0].message and result.errors[0].name == "add"
    assert 'needs a "name"' in result.errors[1].message
    assert 'no "function" object' in result.errors[2].message
    assert "must be a JSON object" in result.errors[4].message
    assert "invalid JSON" in OpenAIParser().parse('{"tool_calls": [').errors[0].message
    assert "must be a list" in OpenAIParser().parse({"tool_calls": "x"}).errors[0].message


# ------------------------------------------------------------------------------ <function=...>
def test_function_tag_calls_with_multiline_values_and_wrapper():
    text = (
        "<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a.py\n</parameter>\n"
        "<parameter=content>\nprint(1)\n\nprint(2)\n</parameter>\n</function>\n</tool_call>\n"
        "<function=add><parameter=a>1</parameter><parameter=b>[2, 3]</parameter></function>"
        "<function=noargs></function>"
    )
    result = get_parser("function").parse(text)
    assert result.errors == ()
    assert calls_of(result) == [
        ("write_file", {"path": "/tmp/a.py", "content": "print(1)\n\nprint(2)"}),
        ("add", {"a": "1", "b": "[2, 3]"}),
        ("noargs", {}),
    ]
    assert all(c.arguments_are_text for c in result.calls)
    # Missing closing tags (generation stopped) still read.
    assert calls_of(
        get_parser("qwen3_coder").parse("<function=f><parameter=x>1</parameter><parameter=y>2")
    ) == [("f", {"x": "1", "y": "2"})]


def test_function_tag_broken_calls():
    result = FunctionTagParser().parse(
        "<function=><parameter=x>1</parameter></function>"
        "<function=f><parameter=x>1</parameter><parameter=x>2</parameter></function>"
        "<function=g><parameter=>1</parameter></function>"
    )
    assert result.calls == ()
    messages = [e.message for e in result.errors]
    assert "has no tool name" in messages[0]
    assert "parameter 'x' is given twice" in messages[1]
    assert "<parameter=...> tag has no name" in messages[2]
    assert all("<function=tool_name><parameter=param>" in m for m in messages)


# ------------------------------------------------------------------------------ registry
def test_registry_lookup_did_you_mean_and_custom_parsers(monkeypatch):
    assert {"hermes", "qwen", "xml", "openai", "function", "qwen3_coder"} <= set(list_parsers())
    with pytest.raises(ConfigError, match="Did you mean 'hermes'"):
        get_parser("hermez")
    with pytest.raises(ConfigError, match="does not accept this configuration"):
        get_parser("hermes", tags={})

    class Upper:
        name = "upper"

        def parse(self, action):
            return ParseResult(calls=(ToolCall(name=str(action).strip().lower()),))

    monkeypatch.setattr(parsers_mod, "_REGISTRY", dict(parsers_mod._REGISTRY))
    register_parser("upper", Upper)
    parser = get_parser("upper")
    assert isinstance(parser, ToolCallParser)
    assert calls_of(parser.parse(" NOW ")) == [("now", {})]
    with pytest.raises(RegistrationError, match="already registered"):
        register_parser("upper", Upper)
    register_parser("upper", HermesParser, overwrite=True)
    assert isinstance(get_parser("upper"), HermesParser)
