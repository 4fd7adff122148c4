"""Built-in environments, registered by id when ``skyrl_gym`` is imported.

Entry points are strings, so no env module is imported until the env is made. ``register`` and
``deregister`` are importable from here too, as in the published package.
"""

from collections.abc import Callable

from skyrl_gym import tools as _tools
from skyrl_gym.registration import deregister, register

__all__ = ["deregister", "register"]

#: The published tool groups, importable as ``from skyrl_gym.tools import SearchToolGroup``.
PUBLISHED_TOOL_GROUPS = ("PythonCodeExecutorToolGroup", "SQLCodeExecutorToolGroup", "SearchToolGroup")


def _published_group(name: str) -> Callable[[], object]:
    def load() -> object:
        from skyrl_gym.envs import published_tools

        return getattr(published_tools, name)

    return load


for _name in PUBLISHED_TOOL_GROUPS:
    _tools.provide(_name, _published_group(_name))


def _register_builtins() -> None:
    builtins: list[tuple[str, str, str]] = [
        # (id, entry point, one-line description)
        (
            "calculator",
            "skyrl_gym.envs.calculator:CalculatorEnv",
            "Two-turn tool use: a JSON calc call, then the answer",
        ),
        (
            "kvchain",
            "skyrl_gym.envs.kvchain:KVChainEnv",
            "Follow k = 3-8 keys through a hidden table with a lookup tool (old-key decoys), then the answer",
        ),
        (
            "bisect",
            "skyrl_gym.envs.bisect:BisectEnv",
            "Find a hidden number in a range from higher/lower feedback within a guess budget",
        ),
        ("gsm8k", "skyrl_gym.envs.math.gsm8k:GSM8KEnv", "Grade-school math, one turn, answer after '####'"),
        (
            "gsm8k_multi_turn",
            "skyrl_gym.envs.math.gsm8k:GSM8KMultiTurnEnv",
            "Grade-school math with feedback and retries, per-turn reward",
        ),
        (
            "text2sql",
            "skyrl_gym.envs.sql.env:Text2SQLEnv",
            "Text-to-SQL in several turns (SkyRL-SQL) on a read-only SQLite sandbox",
        ),
        (
            "search",
            "skyrl_gym.envs.search.env:SearchEnv",
            "Retrieval QA: <search> a BM25 index or a Search-R1 server, <answer> graded by exact match",
        ),
        (
            "judge_qa",
            "skyrl_gym.envs.judge.env:JudgeQAEnv",
            "Open questions graded by an LLM judge through LiteLLM (offline: a string-match judge)",
        ),
        (
            "ask_user",
            "skyrl_gym.envs.judge.simulated_user:AskUserEnv",
            "Ask a simulated user (LiteLLM or offline rules) for missing facts, then answer",
        ),
        (
            "code",
            "skyrl_gym.envs.code.env:CodeEnv",
            "LiveCodeBench-style coding: a fenced Python block graded by hidden tests in a sandbox",
        ),
        (
            "code_multi_turn",
            "skyrl_gym.envs.code.env:CodeMultiTurnEnv",
            "LiveCodeBench-style coding with a sandboxed python tool before the final answer",
        ),
        (
            "aime",
            "skyrl_gym.envs.math.aime:AIMEEnv",
            "Competition math, one turn, 'Answer: ...' graded Minerva style, reward +1/-1",
        ),
        (
            "lcb",
            "skyrl_gym.envs.code.lcb:LCBEnv",
            "LiveCodeBench rows in the published format, graded by the sandboxed code grader",
        ),
        (
            "searchcode",
            "skyrl_gym.envs.searchcode.env:SearchCodeEnv",
            "Math with two tools, <tool><search>/<python></tool>, GSM8K-strict reward at <solution>",
        ),
        (
            "rlm",
            "skyrl_gym.envs.rlm.env:RLMEnv",
            "Recursive LM: a sandboxed persistent Python REPL holds the context; FINAL(...) graded by exact match",
        ),
    ]
    for env_id, entry_point, description in builtins:
        register(env_id, entry_point, description=description, source="builtin")


_register_builtins()
