"""``searchcode``: a math question with two tools, ``search`` and ``python``, graded GSM8K style.

Each turn the model calls one tool or answers::

    <tool><search>population of Oskel</search></tool>     -> user: {"result": "Doc 1: ..."}
    <tool><python>print(1200 * 3)</python></tool>         -> user: 3600
    <solution>... #### 3600</solution>                    -> done

* The episode ends on a turn that holds both ``<solution>`` and ``</solution>``, or after
  ``max_turns`` turns (``extras["max_turns"]``, else ``env_config["max_turns"]``, default 2, as
  published); a tool call on the last turn is not run.
* A tool call is the first ``<tool>...</tool>`` block of the turn, holding one
  ``<name>input</name>`` (the input is stripped). The call runs through the published tool
  groups (:class:`~skyrl_gym.tools.SearchToolGroup`,
  :class:`~skyrl_gym.tools.PythonCodeExecutorToolGroup`), and the tool's result is the
  observation as it is (``"(no output)"`` when the tool returned nothing, where the published
  env gave no observation at all). A malformed call (no block, no tag inside, an unknown tool)
  is the model's mistake: an observation that shows the format, and the episode goes on.
* Reward, at the end only: GSM8K's strict rule. The first ``#### <number>`` (``-?[0-9.,]+``,
  commas dropped) of the model's turns, joined by newlines, must equal
  ``extras["reward_spec"]["ground_truth"]`` as a string: 1.0, else 0.0. The published env read
  the whole chat history, observations included, so a search result or a program's output that
  printed ``#### 42`` could be graded as the model's answer; here only the model's own text
  counts (the same decision as the ``text2sql`` reward).
* The metadata of a turn that was not the last has the published keys ``tool_group``,
  ``tool_name``, ``tool_input`` (``[input]``; ``None``, ``None``, ``""`` for a malformed call,
  plus ``error``) and ``tools`` (the tool names of each group).

``env_config`` (all optional): ``max_turns`` (2), ``python_timeout_s`` (10), and the ``search``
env's retriever keys (:class:`~skyrl_gym.envs.search.SearchConfig`). With no retriever key the
search tool asks the published default server, ``http://127.0.0.1:8000/retrieve`` (``topk`` 3,
``timeout`` 30 s, one ``{"query": ...}`` request per search), as the published env did;
``search_url``/``topk``/``timeout``/``log_requests`` change it, and ``retriever="bm25"``
(optionally with ``corpus_path``) searches a local BM25 index instead. Search results are in the
published format (``observation_format="published"``) unless ``observation_format`` says
otherwise. When the server still fails after the retries, ``step`` raises
:class:`~skyrl_gym.envs.search.RetrievalError` (an infrastructure failure, never a reward of 0).
Python runs in a :class:`~skyrl_gym.sandbox.LocalSandbox` made on the first call and closed by
``close()``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skyrl_gym.config import config_items, without_env_class
from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs._records import ground_truth
from skyrl_gym.envs.published_tools import DEFAULT_SEARCH_URL, PythonCodeExecutorToolGroup, SearchToolGroup
from skyrl_gym.envs.search import types as search_types
from skyrl_gym.envs.search.data import load_bundled_rows
from skyrl_gym.envs.search.env import bm25_index
from skyrl_gym.envs.search.remote import RemoteRetriever
from skyrl_gym.envs.search.types import Retriever, SearchConfig
from skyrl_gym.errors import ConfigError, did_you_mean
from skyrl_gym.types import BaseTextEnvStepOutput, EnvExample

__all__ = ["SearchCodeEnv", "SearchCodeConfig", "strict_gsm8k_answer"]

_TOOL_BLOCK = re.compile(r"<tool>(.*?)</tool>", re.DOTALL)
_TOOL_CALL = re.compile(r"<(\w+)>(.*?)</\1>", re.DOTALL)
_STRICT_ANSWER = re.compile(r"#### (-?[0-9.,]+)")
_FORMAT = "<tool><search>your query</search></tool> or <tool><python>your program</python></tool>"
_NO_CALL = (
    f"No tool call found. Call a tool with {_FORMAT}, or give the final answer in <solution>...</solution>."
)
_NO_TAG = f"The <tool> block names no tool. Write {_FORMAT}."

#: Keys of this env; the others go to :class:`SearchConfig`.
_OWN_KEYS = ("max_turns", "python_timeout_s")


def strict_gsm8k_answer(text: str) -> str | None:
    """The number after the first ``#### `` of ``text`` with its commas removed (GSM8K's strict
    format, as the published ``gsm8k`` scorer reads it), or None."""
    match = _STRICT_ANSWER.search(text)
    return match.group(1).replace(",", "") if match else None


@dataclass(frozen=True)
class SearchCodeConfig:
    """Settings of ``searchcode`` (from ``env_config``)."""

    search: SearchConfig = field(default_factory=lambda: SearchCodeConfig._search_config({}))
    """The search tool's retriever and formatting (the ``search`` env's keys)."""
    max_turns: int = 2
    """Turns per episode when the row has no ``max_turns``."""
    python_timeout_s: float = 10.0
    """Deadline of one ``python`` call (the published tool's 10 s)."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ConfigError(f"searchcode max_turns must be >= 1, got {self.max_turns}")
        if not self.python_timeout_s > 0:
            raise ConfigError(f"searchcode python_timeout_s must be > 0, got {self.python_timeout_s}")

    @staticmethod
    def _search_config(items: Mapping[str, Any]) -> SearchConfig:
        given = {k: v for k, v in items.items() if v is not None}
        if "retriever" not in given and "search_url" not in given:
            given["search_url"] = DEFAULT_SEARCH_URL  # the published tool's server
        given.setdefault("observation_format", "published")
        return SearchConfig.from_env_config(given)

    @classmethod
    def from_env_config(cls, env_config: Any) -> SearchCodeConfig:
        """Read a dict, an OmegaConf ``DictConfig`` or a dataclass; an unknown key raises
        :class:`ConfigError` with the closest known one."""
        items = without_env_class(config_items(env_config, "searchcode env_config"), "searchcode")
        known = (*_OWN_KEYS, *_search_keys())
        for key in items:
            if key not in known:
                raise ConfigError(
                    f"unknown searchcode env_config key {key!r}.{did_you_mean(key, known)} "
                    f"Known keys: {', '.join(sorted(known))}"
                )
        own = {k: items.pop(k) for k in _OWN_KEYS if k in items}
        search = cls._search_config(items)
        values: dict[str, Any] = {"search": search}
        if own.get("max_turns") is not None:
            values["max_turns"] = int(own["max_turns"])
        if own.get("python_timeout_s") is not None:
            values["python_timeout_s"] = float(own["python_timeout_s"])
        return cls(**values)


def _search_keys() -> tuple[str, ...]:
    """The keys :meth:`SearchConfig.from_env_config` reads (``max_turns`` is ours here)."""
    keys = (*search_types._COMMON_KEYS, *search_types._BM25_KEYS, *search_types._REMOTE_KEYS)
    return tuple(k for k in keys if k not in _OWN_KEYS)


def _ground_truth(extras: Mapping[str, Any]) -> str:
    fix = (
        "searchcode needs extras={'reward_spec': {'ground_truth': '<number>'}}, the answer that "
        "follows '####' in a correct solution"
    )
    return str(ground_truth(extras, fix))


class SearchCodeEnv(BaseTextEnv):
    """Answer with the help of a search tool and a Python tool; GSM8K-style reward at the end."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__(env_config, extras)
        self.ground_truth = _ground_truth(self.extras)
        self.config = cfg = SearchCodeConfig.from_env_config(env_config)
        row_turns = self.extras.get("max_turns")
        self.max_turns = int(cfg.max_turns if row_turns is None else row_turns)
        if self.max_turns < 1:
            raise ConfigError(f"searchcode max_turns must be >= 1, got {self.max_turns}")
        search = cfg.search
        retriever: Retriever
        if search.retriever == "bm25":
            retriever = bm25_index(search.corpus_path, search.bm25.k1, search.bm25.b)
        else:
            assert search.remote is not None
            retriever = RemoteRetriever(search.remote)
        self.search_tools = SearchToolGroup(
            search_url=search.remote.url if search.remote else DEFAULT_SEARCH_URL,
            topk=search.topk,
            timeout=search.remote.timeout_s if search.remote else 30,
            log_requests=bool(search.remote and search.remote.log_requests),
            retriever=retriever,
            max_query_chars=search.max_query_chars,
            max_passage_chars=search.max_passage_chars,
            observation_format=search.observation_format,
        )
        self.python_tools = PythonCodeExecutorToolGroup(timeout=cfg.python_timeout_s)
        self.init_tool_groups([self.search_tools, self.python_tools])
        self.model_turns: list[str] = []
        """The model's turns so far (the text the reward reads)."""
        self.answer: str | None = None
        self.correct = False
        self.tool_errors = 0

    @classmethod
    def example(cls) -> EnvExample:
        row = next(r for r in load_bundled_rows("test") if r["hops"] == 1)
        system = (
            "Answer the question. You may call one tool per turn: "
            f"{_FORMAT}. Finish with <solution>your reasoning, then #### <number></solution>."
        )
        return EnvExample(
            env_config={"retriever": "bm25"},
            extras={"reward_spec": {"ground_truth": "42"}, "max_turns": 3},
            prompt=(
                {"role": "system", "content": system},
                {"role": "user", "content": f"{row['question']} Then: what is 6 times 7?"},
            ),
            good_actions=(
                f"<tool><search>{row['question']}</search></tool>",
                "<tool><python>print(6 * 7)</python></tool>",
                "<solution>6 * 7 = 42. #### 42</solution>",
            ),
        )

    def init(self, prompt: Any) -> tuple[Any, dict[str, Any]]:
        self.model_turns = []
        return prompt, {}

    def _parse(self, action: str) -> tuple[str, str, str] | tuple[None, str, str]:
        """(group, tool, input) of the turn's call, or (None, error kind, message)."""
        block = _TOOL_BLOCK.search(action)
        if block is None:
            return None, "no_tool_call", _NO_CALL
        call = _TOOL_CALL.search(block.group(1).strip())
        if call is None:
            return None, "no_tool_tag", _NO_TAG
        name, tool_input = call.group(1), call.group(2).strip()
        group = self.tool_to_toolgroup.get(name)
        if group is None:
            names = sorted(self.tool_to_toolgroup)
            hint = did_you_mean(name, names)
            return None, "unknown_tool", f"Unknown tool {name!r}: the tools are {' and '.join(names)}.{hint}"
        return group, name, tool_input

    def _parse_action(self, action: str) -> tuple[str | None, str | None, list[str] | str]:
        """The published env's parser, kept for code that calls it (its own tests do): ``(tool
        group, tool name, [input])`` as the turn's metadata has them, ``(None, None, "")`` for a
        malformed call."""
        group, name, tool_input = self._parse(action)
        return (None, None, "") if group is None else (group, name, [tool_input])

    def step(self, action: str) -> BaseTextEnvStepOutput:
        text = action if isinstance(action, str) else ("" if action is None else str(action))
        self.turns += 1
        self.model_turns.append(text)
        solved = "<solution>" in text and "</solution>" in text
        if solved or self.turns >= self.max_turns:
            self.answer = strict_gsm8k_answer("\n".join(self.model_turns))
            self.correct = self.answer is not None and self.answer == self.ground_truth
            return BaseTextEnvStepOutput(
                observations=[],
                reward=1.0 if self.correct else 0.0,
                done=True,
                metadata={"parsed_answer": self.answer, "correct": self.correct},
                truncated=not solved,
            )
        group, name, tool_input = self._parse(text)
        metadata: dict[str, Any] = {"tool_group": group, "tool_name": None, "tool_input": ""}
        if group is None:
            self.tool_errors += 1
            content = tool_input
            metadata["error"] = name
        else:
            metadata.update(tool_name=name, tool_input=[tool_input])
            # RetrievalError and SandboxError propagate: infrastructure failures, not the model's
            content = str(self._execute_tool(group, name, [tool_input])) or "(no output)"
        metadata["tools"] = [g.get_tool_names() for g in self.tool_groups]
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": content}],
            reward=0.0,
            done=False,
            metadata=metadata,
            truncated=False,
        )

    def close(self) -> None:
        """Close the python tool's sandbox. Idempotent."""
        self.python_tools.close()

    def get_metrics(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "searches": self.search_tools.searches,
            "python_calls": self.python_tools.runs,
            "tool_errors": self.tool_errors,
            "answered": self.answer is not None,
            "correct": self.correct,
        }
