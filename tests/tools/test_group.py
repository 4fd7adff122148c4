"""``ToolGroup``: method tools, the published API, ``tool_specs`` and validated calls."""

import asyncio

import pytest

from skyrl_gym.errors import ToolDefinitionError, ToolNotFoundError
from skyrl_gym.tools import Tool, ToolContext, ToolGroup, tool
from skyrl_gym.tools import core as tools_core


class Counter(ToolGroup):
    """A group with state, a sync and an async method tool, a static tool and a context tool."""

    def __init__(self) -> None:
        super().__init__(name="counter")
        self.count = 0

    @tool
    def increment(self, by: int = 1) -> int:
        """Add to the counter.

        Args:
            by: How much to add.
        """
        self.count += by
        return self.count

    @tool
    async def aget(self) -> int:
        """Read the counter."""
        await asyncio.sleep(0)
        return self.count

    @tool
    @staticmethod
    def double(x: float) -> float:
        """Double a number."""
        return 2 * x

    @tool
    def whose(self, ctx: ToolContext) -> str:
        """Name the env that called."""
        return f"{self.count}:{ctx.env}"

    def not_a_tool(self) -> None:
        """Plain methods stay out of the group."""


def test_method_tools_are_collected_in_definition_order_and_bound():
    g = Counter()
    assert g.get_name() == "counter"
    assert g.get_tool_names() == ["increment", "aget", "double", "whose"]
    assert g.get_tool_to_group_mapping() == dict.fromkeys(["increment", "aget", "double", "whose"], "counter")
    assert isinstance(g.get_tool("increment"), Tool)
    assert g.get_tool("missing") is None
    # Published style: direct calls, no validation.
    assert g.get_tool("increment")(2) == 2
    assert g.execute_tool("increment", by=3) == 5
    assert g.execute_tool("double", 1.5) == 3.0
    # The descriptor still works on the class and on the instance.
    assert Counter.increment.name == "increment"
    assert g.increment(1) == 6
    with pytest.raises(ToolNotFoundError, match="Did you mean 'increment'"):
        g.execute_tool("incremant")


def test_two_instances_keep_their_own_state():
    a, b = Counter(), Counter()
    a.run_tool("increment", {"by": 5})
    assert b.run_tool("increment", {}) == 1
    assert a.count == 5


def test_tool_specs_are_openai_function_tools_without_self():
    specs = Counter().tool_specs()
    assert specs[0] == {
        "type": "function",
        "function": {
            "name": "increment",
            "description": "Add to the counter.",
            "parameters": {
                "type": "object",
                "properties": {"by": {"type": "integer", "default": 1, "description": "How much to add."}},
                "additionalProperties": False,
            },
        },
    }
    assert specs[2]["function"]["parameters"]["required"] == ["x"]
    assert specs[3]["function"]["parameters"]["properties"] == {}  # the context is hidden


def test_run_tool_validates_and_coerces_arguments():
    g = Counter()
    assert g.run_tool("increment", {"by": "4"}) == 4  # "4" -> 4
    with pytest.raises(ValueError, match="'by': Input should be a valid integer"):
        g.run_tool("increment", {"by": "four"})
    with pytest.raises(ValueError, match="unexpected argument 'step'"):
        g.run_tool("increment", {"step": 1})
    with pytest.raises(ValueError, match="must be a JSON object"):
        g.run_tool("increment", [1])
    with pytest.raises(ToolNotFoundError):
        g.run_tool("nope", {})
    assert g.run_tool("aget", {}) == 4
    assert g.run_tool("whose", {}, ToolContext(env="env1")) == "4:env1"


def test_async_validated_call():
    g = Counter()

    async def main():
        await g.arun_tool("increment", {"by": 2})
        return await g.arun_tool("aget", {})

    assert asyncio.run(main()) == 2


def test_function_tools_join_a_group_through_tools():
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    g = ToolGroup("misc", tools=[add, shout])
    assert g.get_tool_names() == ["add", "shout"]
    assert g.run_tool("add", {"a": 1, "b": "2"}) == 3
    assert g.tool_specs()[1]["function"]["description"] == "Upper-case the text."
    with pytest.raises(ToolDefinitionError, match="two tools named 'add'"):
        ToolGroup("dup", tools=[add, add])


def test_subclass_can_override_and_extend_tools():
    class Base(ToolGroup):
        def __init__(self):
            super().__init__(name="base")

        @tool
        def greet(self) -> str:
            return "hello"

        @tool
        def gone(self) -> str:
            return "x"

    class Child(Base):
        @tool
        def greet(self) -> str:
            return "hi"

        gone = None  # a subclass may drop a tool

        @tool
        def extra(self) -> str:
            return "more"

    c = Child()
    assert c.get_tool_names() == ["greet", "extra"]
    assert c.execute_tool("greet") == "hi"


def test_tool_without_self_in_class_body_is_a_clear_error():
    with pytest.raises(ToolDefinitionError, match="takes no 'self'"):

        class Bad(ToolGroup):
            @tool
            def f() -> str:
                return ""


def test_class_body_detection():
    class K:
        def m(self):
            pass

    def local():
        pass

    assert tools_core._defined_in_class(K.m)
    assert not tools_core._defined_in_class(local)


@tool
def module_level_add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class PicklableGroup(ToolGroup):
    def __init__(self) -> None:
        super().__init__(name="p", tools=[module_level_add])
        self.count = 0

    @tool
    def bump(self) -> int:
        self.count += 1
        return self.count


def test_tools_and_groups_pickle_by_reference():
    import pickle

    g = PicklableGroup()
    g.run_tool("bump", {})
    copy = pickle.loads(pickle.dumps(g))
    assert copy.get_tool_names() == ["bump", "module_level_add"]
    assert copy.run_tool("bump", {}) == 2 and g.count == 1  # bound to the copy, not the original
    assert copy.run_tool("module_level_add", {"a": 1, "b": 2}) == 3
    assert pickle.loads(pickle.dumps(module_level_add)) is module_level_add
