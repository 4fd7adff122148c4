"""``@tool``: names, descriptions and exact JSON schemas from type hints and docstrings."""

import dataclasses
import enum
import warnings
from typing import Annotated, Any, Literal, Optional

import pydantic
import pytest

from skyrl_gym.errors import SkyRLError, ToolDefinitionError
from skyrl_gym.tools import Tool, ToolContext, ToolSchemaWarning, is_strict, set_strict, tool


@pytest.fixture(autouse=True)
def _restore_strict(monkeypatch):
    monkeypatch.delenv("SKYRL_TOOLS_STRICT", raising=False)
    previous = set_strict(None)
    yield
    set_strict(previous)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.0


class Box(pydantic.BaseModel):
    width: int
    label: str = "box"


class Shipment(pydantic.BaseModel):
    box: Box
    points: list[Point]


def params_of(fn) -> dict:
    return fn.spec()["function"]["parameters"]


def one_param(annotation, **default) -> dict:
    """The schema of a one-parameter tool ``f(x: annotation)``."""

    def f(x):  # the annotation is attached below
        return x

    f.__annotations__ = {"x": annotation}
    if default:
        f.__defaults__ = (default["default"],)
    return params_of(tool(f, strict=True))


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (str, {"type": "string"}),
        (bool, {"type": "boolean"}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (list, {"type": "array", "items": {}}),
        (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
        (dict, {"type": "object", "additionalProperties": True}),
        (Literal["asc", "desc"], {"type": "string", "enum": ["asc", "desc"]}),
        (Literal[1, 2, 3], {"type": "integer", "enum": [1, 2, 3]}),
        (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),  # noqa: UP045 - the old spelling on purpose
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (Any, {}),
    ],
    ids=lambda v: str(v)[:30],
)
def test_basic_types_map_to_exact_json_schema(annotation, expected):
    assert one_param(annotation) == {
        "type": "object",
        "properties": {"x": expected},
        "required": ["x"],
        "additionalProperties": False,
    }


def test_enums_nested_dataclass_and_pydantic_model_use_defs():
    @tool(strict=True)
    def ship(color: Color, level: Level, where: Point, box: Box) -> str:
        return "ok"

    assert params_of(ship) == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "color": {"$ref": "#/$defs/Color"},
            "level": {"$ref": "#/$defs/Level"},
            "where": {"$ref": "#/$defs/Point"},
            "box": {"$ref": "#/$defs/Box"},
        },
        "required": ["color", "level", "where", "box"],
        "$defs": {
            "Color": {"enum": ["red", "blue"], "type": "string"},
            "Level": {"enum": [1, 2], "type": "integer"},
            "Point": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "number", "default": 0.0}},
                "required": ["x"],
                # stdlib dataclasses take the arguments model's extra="forbid"
                "additionalProperties": False,
            },
            "Box": {
                "type": "object",
                "properties": {"width": {"type": "integer"}, "label": {"type": "string", "default": "box"}},
                "required": ["width"],
            },
        },
    }
    # Validation builds the real types.
    args, kwargs = ship.bind_arguments(
        {"color": "red", "level": 2, "where": {"x": "3"}, "box": {"width": 5}},
    )
    assert args == []
    assert kwargs == {"color": Color.RED, "level": Level.HIGH, "where": Point(3, 0.0), "box": Box(width=5)}


def test_deeper_nesting_of_models_and_lists():
    @tool(strict=True)
    def send(shipment: Shipment) -> str:
        return "ok"

    schema = params_of(send)
    assert schema["properties"] == {"shipment": {"$ref": "#/$defs/Shipment"}}
    assert schema["$defs"]["Shipment"] == {
        "type": "object",
        "properties": {
            "box": {"$ref": "#/$defs/Box"},
            "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
        },
        "required": ["box", "points"],
    }
    _, kwargs = send.bind_arguments({"shipment": {"box": {"width": 1}, "points": [{"x": 1, "y": 2}]}})
    assert kwargs["shipment"].points == [Point(1, 2.0)]


def test_defaults_optional_and_annotated_constraints():
    @tool(strict=True)
    def search(
        query: str,
        limit: Annotated[int, pydantic.Field(ge=1, le=50)] = 10,
        lang: Optional[str] = None,  # noqa: UP045
    ):
        return query

    assert params_of(search) == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "default": 10, "minimum": 1, "maximum": 50},
            "lang": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["query"],
    }


def test_name_description_and_argument_descriptions_from_google_docstring():
    @tool
    def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
        """Get the current weather for a city.

        Uses the local weather table.

        Args:
            city: The city's name, e.g. "Paris".
            unit: Temperature unit,
                Celsius or Fahrenheit.

        Returns:
            A sentence about the weather.
        """
        return city

    spec = get_weather.spec()
    assert spec["type"] == "function"
    assert spec["function"]["name"] == "get_weather"
    assert (
        spec["function"]["description"]
        == "Get the current weather for a city.\n\nUses the local weather table."
    )
    props = spec["function"]["parameters"]["properties"]
    assert props["city"] == {"type": "string", "description": 'The city\'s name, e.g. "Paris".'}
    assert props["unit"] == {
        "type": "string",
        "enum": ["C", "F"],
        "default": "C",
        "description": "Temperature unit,\nCelsius or Fahrenheit.",
    }


def test_name_and_description_overrides_and_no_docstring():
    @tool(name="lookup-v2", description="Look a word up.")
    def lookup(word: str) -> str:
        """Ignored docstring."""
        return word

    assert lookup.name == "lookup-v2"
    assert lookup.spec()["function"]["description"] == "Look a word up."

    @tool
    def bare() -> str:
        return "x"

    assert bare.spec() == {
        "type": "function",
        "function": {
            "name": "bare",
            "description": "",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    }


def test_parameters_that_clash_with_pydantic_names_are_fine():
    @tool(strict=True)
    def q(json: str, schema: str, model_config: int, copy: bool) -> str:
        return json + schema

    assert list(params_of(q)["properties"]) == ["json", "schema", "model_config", "copy"]
    _, kwargs = q.bind_arguments({"json": "a", "schema": "b", "model_config": "3", "copy": True})
    assert kwargs == {"json": "a", "schema": "b", "model_config": 3, "copy": True}


def test_context_parameter_is_injected_and_hidden_from_schema():
    @tool(strict=True)
    def whoami(ctx: ToolContext, n: int) -> str:
        return f"{ctx.env}-{n}"

    @tool(strict=True)
    def generic(n: int, *, context: ToolContext[dict] | None = None) -> str:
        return str(context.env)

    assert params_of(whoami)["properties"] == {"n": {"type": "integer"}}
    assert params_of(generic)["properties"] == {"n": {"type": "integer"}}
    assert whoami.run({"n": 2}, ToolContext(env="E")) == "E-2"
    assert generic.run({"n": 1}, ToolContext(env={"a": 1})) == "{'a': 1}"
    # A parameter merely *named* ctx/context is an ordinary argument: no name guessing.
    with pytest.warns(ToolSchemaWarning):

        @tool
        def named(ctx, context) -> str:
            return f"{ctx}{context}"

    assert sorted(params_of(named)["properties"]) == ["context", "ctx"]


def test_unannotated_parameter_warns_and_is_permissive():
    with pytest.warns(
        ToolSchemaWarning, match=r"parameter 'b' has no type annotation.*annotate it, e.g. 'b: str'"
    ):

        @tool
        def mul(a: int, b) -> int:
            return a * int(b)

    assert params_of(mul)["properties"] == {"a": {"type": "integer"}, "b": {}}
    assert mul.run({"a": "3", "b": "4"}) == 12


def test_strict_mode_fails_at_decoration_time_naming_the_parameter():
    with pytest.raises(
        ToolDefinitionError, match=r"tool 'mul': parameter 'b' has no type annotation.*e\.g\. 'b: str'"
    ):

        @tool(strict=True)
        def mul(a: int, b) -> int:
            return a

    err = ToolDefinitionError("x")
    assert isinstance(err, SkyRLError) and isinstance(err, TypeError)


def test_project_wide_strict_switch_and_env_var(monkeypatch):
    assert is_strict() is False
    set_strict(True)
    with pytest.raises(ToolDefinitionError, match="parameter 'x'"):
        tool(lambda x: x, name="lam")
    # An explicit strict=False wins over the project-wide switch.
    with pytest.warns(ToolSchemaWarning):
        tool(lambda x: x, name="lam", strict=False)
    set_strict(None)
    monkeypatch.setenv("SKYRL_TOOLS_STRICT", "1")
    assert is_strict() is True
    with pytest.raises(ToolDefinitionError):

        @tool
        def f(y):
            return y


def test_var_args_warn_or_fail_in_strict_mode():
    with pytest.warns(ToolSchemaWarning, match=r"\*\*extra accepts any extra argument"):

        @tool
        def loose(a: int, **extra: Any) -> str:
            return f"{a}{sorted(extra)}"

    assert params_of(loose)["additionalProperties"] is True
    assert loose.run({"a": 1, "zz": 2}) == "1['zz']"
    with pytest.raises(ToolDefinitionError, match=r"\*rest cannot be filled"):

        @tool(strict=True)
        def star(*rest: int) -> int:
            return 0


def test_types_without_json_schema_fail_at_decoration_time():
    class Opaque:
        pass

    with pytest.raises(ToolDefinitionError, match="cannot build a JSON schema"):

        @tool
        def f(x: Opaque) -> str:
            return ""


def test_unresolvable_string_annotation_names_the_parameter():
    def f(x: "NoSuchType") -> str:  # noqa: F821
        return ""

    with pytest.raises(ToolDefinitionError, match="parameter 'x' cannot be resolved"):
        tool(f)


def test_bad_names_and_timeouts_are_rejected():
    with pytest.raises(ToolDefinitionError, match="not allowed"):
        tool(lambda: 1)  # "<lambda>"
    with pytest.raises(ToolDefinitionError, match="timeout"):

        @tool(timeout=0)
        def f() -> str:
            return ""


def test_sync_and_async_functions_both_become_tools():
    @tool
    async def aping(n: int) -> str:
        """Async ping."""
        return "pong" * n

    @tool
    def ping(n: int) -> str:
        return "pong" * n

    assert isinstance(aping, Tool) and aping.is_async and not ping.is_async
    assert aping.run({"n": "2"}) == "pongpong"
    assert ping.run({"n": 1}) == "pong"
    with pytest.raises(ValueError, match="missing required argument 'n'"):
        ping.run({})


def test_no_warnings_for_a_fully_annotated_tool():
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @tool
        def fine(a: int, b: list[str] | None = None) -> str:
            return ""

    assert fine.name == "fine"


FUTURE_MODULE = '''
from __future__ import annotations
import dataclasses
from typing import Literal
from skyrl_gym.tools import ToolContext, ToolGroup, tool

@dataclasses.dataclass
class Q:
    text: str
    k: int = 3

class Search(ToolGroup):
    def __init__(self):
        super().__init__("search")

    @tool(strict=True)
    def search(self, q: Q, mode: Literal["bm25", "dense"] = "bm25", *, ctx: ToolContext | None = None) -> list:
        """Search the corpus.

        Args:
            q: The query.
        """
        return [q.text] * q.k + [mode, ctx.env]

def make_local():
    class Local:
        pass

    @tool
    def f(x: Local) -> str:
        return ""
'''


def test_string_annotations_from_future_import(tmp_path, monkeypatch):
    import importlib
    import sys

    (tmp_path / "future_tools_mod.py").write_text(FUTURE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("future_tools_mod")
    try:
        group = mod.Search()
        assert group.tool_specs()[0]["function"]["parameters"]["properties"]["q"] == {
            "$ref": "#/$defs/Q",
            "description": "The query.",
        }
        assert group.run_tool("search", {"q": {"text": "hi", "k": "2"}}, ToolContext(env="E")) == [
            "hi",
            "hi",
            "bm25",
            "E",
        ]
        with pytest.raises(ToolDefinitionError, match="'Local' of parameter 'x' cannot be resolved"):
            mod.make_local()
    finally:
        sys.modules.pop("future_tools_mod", None)
