"""The published skyrl-gym env ids ``aime``, ``lcb``, ``searchcode`` and its tool groups.

Each id runs through ``skyrl_gym.make`` on rows in the published format and on real parts: the
local sandbox (python, lcb), a retrieval HTTP server on 127.0.0.1 (search), a SQLite file (sql).
"""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys

import pytest

import skyrl_gym
from skyrl_gym.envs.search import RetrievalError
from skyrl_gym.errors import ConfigError
from skyrl_gym.tools import PythonCodeExecutorToolGroup, SearchToolGroup, SQLCodeExecutorToolGroup
from tests.envs.test_search import SMALL_CORPUS, RetrievalServer


@pytest.fixture
def small_server():
    with RetrievalServer(SMALL_CORPUS) as s:
        yield s


def _free_port_url() -> str:
    with socket.socket() as s:  # a port that nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/retrieve"


# =========================================================================== aime
#: (response, ground truth, reward, acc, pred) as skyrl-gym 0.4.0's
#: ``skyrl_gym.envs.aime.utils.compute_score`` returns them (run in a separate venv with the
#: published package; the values are copied here, the package is not imported).
PUBLISHED_AIME = [
    ("Let me think.\nAnswer: 204", "204", 1.0, True, "204"),
    ("So the result is $\\boxed{204}$.\nAnswer: $\\boxed{204}$", "204", 1.0, True, "204"),
    ("answer : 1,000", "1000", 1.0, True, "1000"),
    ("Answer: \\frac12", "\\frac{1}{2}", 1.0, True, "\\frac{1}{2}"),
    ("Answer: x = 5", "5", 1.0, True, "5"),
    ("Answer: 5 degrees", "5", 1.0, True, "5"),
    ("Answer: 12\nWait, that is wrong.\nAnswer: 13", "13", 1.0, True, "13"),
    ("Answer: 12\nWait, that is wrong.\nAnswer: 13", "12", -1.0, False, "13"),
    ("I could not finish the problem.", "7", -1.0, False, "[INVALID]"),
    ("Answer: 7<|im_end|>", "7", 1.0, True, "7"),
    ("Answer: 3\n" + "and then a long tail of text " * 12, "3", -1.0, False, "[INVALID]"),
    ("Answer: \\sqrt3", "\\sqrt{3}", 1.0, True, "\\sqrt{3}"),
    ("Answer: 033", "33", -1.0, False, "033"),
    ("ANSWER:   \\text{(B)}  ", "(B)", 1.0, True, "(B)"),
    ("Answer: 90^\\circ", "90", 1.0, True, "90"),
    ("Answer: $1,234$", "1234", 1.0, True, "1234"),
    ("Answer: \\overline{AB}", "AB", 1.0, True, "AB"),
    ("Answer: 10 \\text{ cm}", "10", 1.0, True, "10"),
    ("Answer:", "0", -1.0, False, "[INVALID]"),
    ("Answer: -4.5", "-4.5", 1.0, True, "-4.5"),
]


@pytest.mark.parametrize(("response", "truth", "reward", "acc", "pred"), PUBLISHED_AIME)
def test_aime_matches_the_published_grader(response, truth, reward, acc, pred):
    env = skyrl_gym.make("aime", extras={"reward_model": {"ground_truth": truth}})
    out = env.step(response)
    assert (out.reward, out.done, out.observations) == (reward, True, [])
    assert out.metadata == {"acc": acc, "pred": pred}


def test_aime_takes_either_key_and_an_int_answer():
    for extras in ({"reward_spec": {"ground_truth": "204"}}, {"reward_model": {"ground_truth": 204}}):
        env = skyrl_gym.make("aime", env_config={}, extras=extras)
        assert env.step("Answer: 204").reward == 1.0
        assert env.get_metrics() == {"correct": True, "formatted": True}


def test_aime_row_without_an_answer_names_both_keys():
    for extras in ({}, {"reward_model": {}}, {"reward_spec": {"ground_truth": None}}):
        with pytest.raises(ConfigError, match=r"reward_model.*reward_spec"):
            skyrl_gym.make("aime", extras=extras)


# =========================================================================== lcb
STDIN_TESTS = [
    {"input": "1 2\n", "output": "3\n", "testtype": "stdin", "metadata": {}},
    {"input": "10 -4\n", "output": "6\n", "testtype": "stdin", "metadata": {}},
]
FUNCTIONAL_TESTS = [
    {
        "input": "[2,7,11,15]\n9",
        "output": "[0, 1]",
        "testtype": "functional",
        "metadata": {"func_name": "twoSum"},
    },
    {
        "input": "[3,2,4]\n6",
        "output": "[1, 2]",
        "testtype": "functional",
        "metadata": {"func_name": "twoSum"},
    },
]
TWO_SUM = """class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = defaultdict(int)
        for i, x in enumerate(nums):
            if target - x in seen:
                return [seen[target - x], i]
            seen[x] = i
"""


def _lcb(tests, **config):
    """An lcb env on a published row: the tests as a JSON string under reward_spec."""
    return skyrl_gym.make(
        "lcb", env_config=config, extras={"reward_spec": {"ground_truth": json.dumps(tests)}}
    )


def test_lcb_stdin_row_passes_in_the_sandbox():
    env = _lcb(STDIN_TESTS)
    try:
        out = env.step("Here:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\nDone.")
        assert (out.reward, out.done, out.observations) == (1.0, True, [])
        assert out.metadata["parsed_code"] == "a, b = map(int, input().split())\nprint(a + b)"
        assert out.metadata["tests_passed"] == 2
    finally:
        env.close()


def test_lcb_functional_row_reads_func_name_from_each_tests_metadata():
    # List and defaultdict are not imported: the published grader's prelude provides them.
    env = _lcb(FUNCTIONAL_TESTS)
    try:
        assert env.tests[0].func_name == "twoSum"
        out = env.step(f"```python\n{TWO_SUM}```")
        assert out.reward == 1.0 and out.metadata["passed"] is True
    finally:
        env.close()
    env = _lcb(FUNCTIONAL_TESTS)
    try:
        wrong = TWO_SUM.replace("[seen[target - x], i]", "[i, seen[target - x]]")
        out = env.step(f"```python\n{wrong}```")
        assert out.reward == 0.0 and out.metadata["tests"][0]["error"] == "wrong_answer"
    finally:
        env.close()


def test_lcb_future_import_still_comes_first():
    env = _lcb(STDIN_TESTS)
    try:
        code = '"""Sum."""\nfrom __future__ import annotations\nxs: List[int] = list(map(int, input().split()))\nprint(sum(xs))\n'
        assert env.step(f"```py\n{code}```").reward == 1.0
    finally:
        env.close()


def test_lcb_last_block_of_any_language_is_the_program():
    env = _lcb(STDIN_TESTS)
    try:
        out = env.step("```python\nprint(3)\n```\nor in C:\n```cpp\nint main() { return 0; }\n```")
        assert out.metadata["parsed_code"] == "int main() { return 0; }"
        assert out.reward == 0.0 and out.metadata["error"] == "compile_error"
    finally:
        env.close()


def test_lcb_no_block_gives_no_code_and_zero():
    env = _lcb(STDIN_TESTS)
    out = env.step("print(3) but not fenced")
    assert (out.reward, out.done) == (0.0, True)
    assert out.metadata["parsed_code"] is None and out.metadata["error"] == "format"
    env.close()


@pytest.mark.parametrize(
    ("extras", "match"),
    [
        ({}, "reward_spec"),
        ({"reward_spec": {"ground_truth": "not json"}}, "not valid JSON"),
        (
            {
                "reward_spec": {
                    "ground_truth": json.dumps([{"input": "1", "output": "1", "testtype": "functional"}])
                }
            },
            "func_name",
        ),
    ],
)
def test_lcb_bad_rows_say_what_to_fix(extras, match):
    with pytest.raises(ConfigError, match=match):
        skyrl_gym.make("lcb", extras=extras)


# =========================================================================== searchcode
def _published(url, **cfg):
    """The published SearchToolGroup's settings."""
    return {"search_url": url, "topk": 2, "timeout": 5, "log_requests": False, **cfg}


def _searchcode(env_config, truth="42", **extras):
    return skyrl_gym.make(
        "searchcode", env_config=env_config, extras={"reward_spec": {"ground_truth": truth}, **extras}
    )


def test_searchcode_episode_with_both_tools(small_server):
    env = _searchcode(_published(small_server.url), max_turns=4)
    try:
        out = env.step("Let me look it up. <tool><search> zorblat fruit </search></tool>")
        assert small_server.requests == [{"query": "zorblat fruit", "topk": 2, "return_scores": True}]
        assert json.loads(out.observations[0]["content"]) == {
            "result": 'Doc 1: "Zorblat"\nThe zorblat is a purple fruit grown on Oskel.\n'
            'Doc 2: "Zorblat tree"\nA zorblat tree bears fruit every second summer.\n'
        }
        assert out.metadata == {
            "tool_group": "SearchToolGroup",
            "tool_name": "search",
            "tool_input": ["zorblat fruit"],
            "tools": [["search"], ["python"]],
        }
        assert (out.reward, out.done) == (0.0, False)
        out = env.step("<tool><python>\nprint(6 * 7)\n</python></tool>")
        assert out.observations == [{"role": "user", "content": "42"}]
        assert out.metadata["tool_group"] == "PythonCodeExecutorToolGroup"
        assert out.metadata["tool_input"] == ["print(6 * 7)"]
        out = env.step("<solution>6 * 7 = 42\n#### 42</solution>")
        assert (out.reward, out.done, out.observations) == (1.0, True, [])
        assert env.get_metrics() == {
            "turns": 3,
            "searches": 1,
            "python_calls": 1,
            "tool_errors": 0,
            "answered": True,
            "correct": True,
        }
    finally:
        env.close()


def test_searchcode_scores_the_models_turns_only():
    """A tool's output that reads '#### 42' is not the model's answer (published: it was)."""
    env = _searchcode({"retriever": "bm25"}, max_turns=3)
    try:
        out = env.step("<tool><python>print('#' * 4, 6 * 7)</python></tool>")
        assert out.observations[0]["content"] == "#### 42"
        out = env.step("<solution>I am not sure.</solution>")
        assert out.done and out.reward == 0.0 and out.metadata["parsed_answer"] is None
    finally:
        env.close()


def test_searchcode_strict_format_and_first_answer():
    for text, reward in [
        ("<solution>#### 1,042</solution>", 0.0),  # the answer is "1042"
        ("<solution>####42</solution>", 0.0),  # strict: one space after ####
        ("<solution>#### 42 (or #### 43)</solution>", 1.0),  # the first one counts
    ]:
        env = _searchcode({"retriever": "bm25"})
        assert env.step(text).reward == reward, text
        env.close()
    env = _searchcode({"retriever": "bm25"}, truth=1042)
    assert env.step("<solution>#### 1,042</solution>").reward == 1.0


def test_searchcode_ends_at_two_turns_by_default_without_running_the_last_call(small_server):
    env = _searchcode(_published(small_server.url))
    assert env.max_turns == 2
    assert not env.step("<tool><search>zorblat</search></tool>").done
    out = env.step("<tool><search>quellnut</search></tool>")
    assert (out.done, out.reward, out.observations) == (True, 0.0, [])
    assert len(small_server.requests) == 1


@pytest.mark.parametrize(
    ("action", "kind", "words"),
    [
        ("I think the answer is 42.", "no_tool_call", "<tool><search>"),
        ("<tool>search for zorblat</tool>", "no_tool_tag", "names no tool"),
        ("<tool><calc>6*7</calc></tool>", "unknown_tool", "'calc'"),
    ],
)
def test_searchcode_malformed_calls_become_observations(small_server, action, kind, words):
    env = _searchcode(_published(small_server.url), max_turns=3)
    out = env.step(action)
    assert (out.done, out.reward) == (False, 0.0)
    assert words in out.observations[0]["content"]
    assert out.metadata == {
        "tool_group": None,
        "tool_name": None,
        "tool_input": "",
        "error": kind,
        "tools": [["search"], ["python"]],
    }
    assert not small_server.requests


def test_searchcode_python_errors_and_timeouts_are_observations():
    env = _searchcode({"retriever": "bm25", "python_timeout_s": 0.5}, max_turns=5)
    try:
        out = env.step("<tool><python>1 / 0</python></tool>")
        content = out.observations[0]["content"]
        assert content.startswith("Error executing Python code: Traceback") and "ZeroDivisionError" in content
        out = env.step("<tool><python>import time; time.sleep(30)</python></tool>")
        assert (
            out.observations[0]["content"]
            == "Error executing Python code: Execution timed out after 0.5 seconds."
        )
        assert env.step("<tool><python>x = 1</python></tool>").observations[0]["content"] == "(no output)"
    finally:
        env.close()
        env.close()


def test_searchcode_local_bm25_corpus(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "k1", "contents": '"Kelpfish"\nA kelpfish has 7 fins.'}) + "\n")
    env = _searchcode({"retriever": "bm25", "corpus_path": str(corpus)}, max_turns=3)
    out = env.step("<tool><search>kelpfish fins</search></tool>")
    assert json.loads(out.observations[0]["content"]) == {
        "result": 'Doc 1: "Kelpfish"\nA kelpfish has 7 fins.\n'
    }


def test_searchcode_defaults_are_the_published_server():
    env = _searchcode(None)
    config = env.search_tools.retriever.config
    assert (config.url, config.timeout_s, config.request_format) == (
        "http://127.0.0.1:8000/retrieve",
        30.0,
        "query",
    )
    assert env.search_tools.topk == 3 and env.python_tools.timeout == 10.0


def test_searchcode_dead_server_is_an_infrastructure_error():
    env = _searchcode(_published(_free_port_url(), max_retries=0, timeout=0.5), max_turns=3)
    with pytest.raises(RetrievalError):
        env.step("<tool><search>zorblat</search></tool>")


def test_searchcode_bad_rows_and_configs():
    with pytest.raises(ConfigError, match="reward_spec"):
        skyrl_gym.make("searchcode", extras={"ground_truth": "42"})
    with pytest.raises(ConfigError, match="python_timeout_s"):
        _searchcode({"python_timeout": 3})
    with pytest.raises(ConfigError, match="max_turns"):
        _searchcode({"retriever": "bm25"}, max_turns=0)


# =========================================================================== published module paths
@pytest.mark.parametrize(
    ("env_id", "path"),
    [
        ("aime", "skyrl_gym.envs.aime.env:AIMEEnv"),
        ("lcb", "skyrl_gym.envs.lcb.env:LCBEnv"),
        ("searchcode", "skyrl_gym.envs.searchcode.env:SearchCodeEnv"),
    ],
)
def test_published_module_paths_name_the_registered_envs(env_id, path):
    import importlib

    module, name = path.split(":")
    cls = getattr(importlib.import_module(module), name)
    assert cls is skyrl_gym.spec(env_id).load()
    skyrl_gym.register(f"probe_{env_id}", path)
    try:
        assert type(skyrl_gym.make(f"probe_{env_id}", extras=dict(cls.example().extras))) is cls
    finally:
        skyrl_gym.registry.pop(f"probe_{env_id}", None)


# =========================================================================== tool groups
@pytest.fixture
def db_dir(tmp_path):
    (tmp_path / "shop").mkdir()
    conn = sqlite3.connect(tmp_path / "shop" / "shop.sqlite")
    conn.executescript(
        "CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT, price REAL);"
        "INSERT INTO item VALUES (1, 'kettle', 24.5), (2, 'lamp', 12.0), (3, 'mug', 3.25);"
    )
    conn.commit()
    conn.close()
    return tmp_path


def test_sql_tool_group_on_a_real_file(db_dir):
    group = SQLCodeExecutorToolGroup(str(db_dir))
    assert (group.get_name(), group.get_tool_names()) == ("SQLCodeExecutorToolGroup", ["sql"])
    out = group.execute_tool("sql", "shop", "SELECT name, price FROM item WHERE price > 5 ORDER BY id", 3)
    assert out == (
        "\n\n<observation>name | price\nkettle | 24.5\nlamp | 12.0\n"
        "<reminder>You have 3 turns left to complete the task.</reminder></observation>\n\n"
    )
    # read-only: a write is refused and the file keeps its rows
    out = group.execute_tool("sql", "shop", "DELETE FROM item", 2)
    assert "<observation>Refused:" in out
    assert sqlite3.connect(db_dir / "shop" / "shop.sqlite").execute(
        "SELECT count(*) FROM item"
    ).fetchone() == (3,)
    assert "Error:" in group.execute_tool("sql", "shop", "SELECT nope FROM item", 1)
    assert "Your previous action is invalid" in group.execute_tool("sql", "shop", None, 1)
    slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    assert "<observation>Timeout:" in group.sql("shop", slow, 1, timeout=0.2)


def test_sql_tool_group_missing_database_is_a_config_error(db_dir):
    group = SQLCodeExecutorToolGroup(str(db_dir))
    with pytest.raises(ConfigError, match="not found"):
        group.sql("nowhere", "SELECT 1", 1)
    with pytest.raises(ConfigError, match="db_id"):
        group.sql("../shop", "SELECT 1", 1)


def test_search_tool_group_on_a_real_server(small_server):
    group = SearchToolGroup(search_url=small_server.url, topk=1, timeout=5, log_requests=False)
    assert (group.get_name(), group.get_tool_names()) == ("SearchToolGroup", ["search"])
    out = group.execute_tool("search", "  zorblat fruit ")
    assert json.loads(out) == {"result": 'Doc 1: "Zorblat"\nThe zorblat is a purple fruit grown on Oskel.\n'}
    assert small_server.requests == [{"query": "zorblat fruit", "topk": 1, "return_scores": True}]
    assert group.search(None) == "" and len(small_server.requests) == 1
    defaults = SearchToolGroup()
    assert (defaults.search_url, defaults.topk, defaults.timeout) == ("http://127.0.0.1:8000/retrieve", 3, 30)


def test_python_tool_group_in_the_sandbox():
    group = PythonCodeExecutorToolGroup()
    try:
        assert (group.get_name(), group.get_tool_names(), group.timeout) == (
            "PythonCodeExecutorToolGroup",
            ["python"],
            10.0,
        )
        assert group.execute_tool("python", "print('  hi  ')\n") == "hi"
        assert (
            group.python("import sys; sys.stderr.write('careful\\n')")
            == "Error executing Python code: careful"
        )
        assert group.python("x = 1") == ""
        # it runs in the sandbox's own working directory, not the test's
        assert group.python("import os; print(os.getcwd())") == group.sandbox.workdir
    finally:
        group.close()
        group.close()
    quick = PythonCodeExecutorToolGroup(timeout=0.3)
    try:
        assert quick.python("while True: pass") == (
            "Error executing Python code: Execution timed out after 0.3 seconds."
        )
    finally:
        quick.close()


def test_importing_the_tool_groups_loads_no_env_or_sandbox_module():
    code = (
        "import sys; from skyrl_gym.tools import SearchToolGroup, SQLCodeExecutorToolGroup, "
        "PythonCodeExecutorToolGroup; "
        "print([m for m in sys.modules if m.startswith(('skyrl_gym.envs.', 'skyrl_gym.sandbox')) "
        "and m != 'skyrl_gym.envs.published_tools'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_env_class_inside_the_env_section_is_accepted_when_it_names_the_env():
    """The published tests and configs carry ``env_class`` in the env's own section
    (``env_config=DictConfig({"env_class": "searchcode"})``)."""
    from omegaconf import DictConfig

    from skyrl_gym.envs.search.types import SearchConfig
    from skyrl_gym.envs.sql.types import Text2SQLConfig

    env = _searchcode(DictConfig({"env_class": "searchcode"}), max_turns=2)
    try:
        env.init([])
        # the published parser, which the published tests call
        assert env._parse_action("<tool><search>binary search</search></tool>")[1:] == (
            "search",
            ["binary search"],
        )
        assert env._parse_action("no call") == (None, None, "")
        assert env.step("<tool><python>print(6 * 7)</python></tool>").observations[0]["content"] == "42"
    finally:
        env.close()
    assert SearchConfig.from_env_config({"env_class": "search"}) == SearchConfig.from_env_config({})
    assert Text2SQLConfig.from_sources({"env_class": "text2sql"}, {}) == Text2SQLConfig.from_sources({}, {})
    # another env's name is a mistake, and a typo still gets its "did you mean"
    with pytest.raises(ConfigError, match=r"env_class='text2sql', another env: drop the key"):
        _searchcode({"env_class": "text2sql"})
    with pytest.raises(
        ConfigError, match="unknown searchcode env_config key 'max_turn'. Did you mean 'max_turns'"
    ):
        _searchcode({"env_class": "searchcode", "max_turn": 3})
    with pytest.raises(ConfigError, match="env_class='bisect', another env"):
        skyrl_gym.make("kvchain", env_config={"env_class": "bisect"}, extras={})
