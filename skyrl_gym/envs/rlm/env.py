"""Recursive Language Model (RLM) envs: the model answers by programming a persistent REPL.

The REPL holds the task's ``context`` (often too long to read at once); the model writes
```` ```repl ```` blocks, sees what they print, and ends with ``FINAL(answer)`` or
``FINAL_VAR(variable)``. One episode::

    init  -> [system prompt, "Your context is a str with N total characters, ...", turn prompt]
    step  -> the last ```repl block runs in the REPL (variables persist between turns)
             observation "Code executed: ... REPL output: ..." and the next turn prompt
    ends  -> FINAL(...) / FINAL_VAR(...) (reward from ``_get_reward``), or the turn limit (0)

:class:`BaseRLMEnv` is the published ``skyrl_gym.envs.rlm.env.BaseRLMEnv`` (same constructor,
extras keys, prompts, observations, metrics and subclass hooks ``_get_reward``,
``_get_system_prompt``, ``_get_repl_tools``). :class:`RLMEnv` (id ``rlm``) grades the answer
against ``extras["reward_spec"]["ground_truth"]``. Where this differs on purpose:

* **The model's code never runs in this process.** It runs in a worker process in a
  ``LocalSandbox`` (:class:`~skyrl_gym.envs.rlm.repl.SandboxREPL`: own uid, bubblewrap where it
  works, memory/process/CPU limits), so ``import`` works and nothing the code does reaches the
  trainer. A cell past ``repl_timeout`` kills the worker; a fresh one is started with the same
  context and tools, and the observation says that the variables were lost. ``close()`` or the
  death of this process (even ``kill -9``) leaves no process behind.
* **The per-turn prompt is not removed from the conversation.** The published env pops the
  previous turn's prompt off the generator's ``chat_history`` list (it keeps a reference to
  the list ``init`` returned). Our runtime copies messages and appends tokens, never removing
  any (the sampled tokens are the trained tokens), so an env cannot edit the history, and this
  one never changes a list it returned. The reminder still comes last before every model turn;
  with ``turn_prompts="short"`` (the default) later reminders leave out the quoted question,
  which stays in the conversation in the first one, so a long prompt is not copied per turn.
  ``"full"`` repeats it each turn (the published text), ``"none"`` sends only the first.
* ``FINAL(...)`` / ``FINAL_VAR(...)`` end the episode also in a turn without a repl block
  (published: such a turn only gets the no-block observation, though the system prompt asks
  for ``FINAL_VAR`` "in a SEPARATE response").

``extras["lm_callback"]`` (``prompts -> answers``) and ``extras["subcall_fn"]``
(``(prompt, context=...) -> answer``) are accepted as published: the REPL gets
``llm_query``, ``llm_query_batched``, ``rlm_query``, ``rlm_query_batched``, which run the
callbacks in this process (the worker calls them over its pipe); the system prompt lists them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from skyrl_gym.config import config_items
from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs._records import ground_truth
from skyrl_gym.envs.rlm._text import (
    DEFAULT_RLM_SYSTEM_PROMPT,
    NO_BLOCK_MESSAGE,
    find_code_block,
    find_final,
    find_final_var,
    format_context_metadata,
    format_observation,
    tools_section,
    turn_prompt,
)
from skyrl_gym.envs.rlm.repl import RESERVED_NAMES, SandboxREPL, lm_functions
from skyrl_gym.envs.rlm.types import RLMConfig
from skyrl_gym.errors import ConfigError, EnvContractError, did_you_mean
from skyrl_gym.types import BaseTextEnvStepOutput, ConversationType, EnvExample

__all__ = ["BaseRLMEnv", "RLMEnv", "DEFAULT_RLM_SYSTEM_PROMPT", "make_config", "normalize_answer"]


def make_config(env_config: Any) -> RLMConfig:
    """The :class:`RLMConfig` of ``env_config`` (a dict, an attribute-style config, an
    ``RLMConfig`` or None); unknown keys raise ``ConfigError`` naming the closest one."""
    if isinstance(env_config, RLMConfig):
        return env_config
    values = config_items(env_config)
    known = set(RLMConfig.__dataclass_fields__)
    for key in values:
        if key not in known:
            raise ConfigError(
                f"unknown rlm env_config key {key!r}; known: {sorted(known)}." + did_you_mean(key, known)
            )
    return RLMConfig(**{k: v for k, v in values.items() if v is not None})


def normalize_answer(text: Any) -> str:
    """An answer for comparison: whitespace runs collapsed to one space, stripped, casefolded."""
    return " ".join(str(text).split()).casefold()


def _prompt_text(prompt: ConversationType) -> str:
    """The root prompt: the text of every message with content, joined by newlines."""
    texts = []
    for message in prompt:
        content = message.get("content")
        if isinstance(content, list):  # content parts: their text
            content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        if content:
            texts.append(str(content))
    return "\n".join(texts)


def _context_of(extras: Mapping[str, Any], root_prompt: str) -> Any:
    """``extras["extra_info"]["context_text"]`` (a JSON object decoded to a dict), else the
    root prompt."""
    info = extras.get("extra_info")
    if info is not None and not isinstance(info, Mapping):
        raise ConfigError(f"extras['extra_info'] must be a mapping, got {type(info).__name__}")
    context = (info or {}).get("context_text") or root_prompt
    if isinstance(context, str):
        try:
            decoded = json.loads(context)
        except (ValueError, RecursionError):
            return context
        if isinstance(decoded, dict):
            return decoded
    return context


def _callback(extras: Mapping[str, Any], key: str) -> Callable[..., Any] | None:
    value = extras.get(key)
    if value is not None and not callable(value):
        raise ConfigError(f"extras[{key!r}] must be callable, got {type(value).__name__}")
    return value


class BaseRLMEnv(BaseTextEnv):
    """Base class of RLM envs: the REPL, the turn loop and ``FINAL``/``FINAL_VAR`` parsing.

    Subclasses supply the task through three hooks: ``_get_reward(final_answer)`` (default:
    1.0 for a non-empty answer), ``_get_system_prompt()`` (a template that may hold
    ``{custom_tools_section}``) and ``_get_repl_tools()`` (``{name: value}`` or
    ``{name: {"tool": value, "description": "..."}}``; called after ``self._context`` is set,
    so closures can use it; functions run in the env's process, values are copied into the
    REPL and must be builtin types).

    ``extras`` keys (the published ones): ``max_turns`` (default 10), ``repl_timeout``
    (seconds per cell, default 180), ``extra_info.context_text``, ``lm_callback``,
    ``subcall_fn``, ``depth``. ``env_config``: :class:`~skyrl_gym.envs.rlm.types.RLMConfig`.
    The runtime's step deadline (``RolloutConfig.env_step_timeout_s``, 60 s by default) should
    exceed ``repl_timeout`` by a few seconds (a restart follows a timeout); otherwise a long cell
    masks the episode instead of coming back as a timeout observation.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__(env_config, extras)
        self.config = make_config(env_config)
        turns = self.extras.get("max_turns")
        self.max_turns = self.config.max_turns if turns is None else turns
        if not isinstance(self.max_turns, int) or isinstance(self.max_turns, bool) or self.max_turns < 1:
            raise ConfigError(f"extras['max_turns'] must be an int >= 1, got {self.max_turns!r}")
        timeout = self.extras.get("repl_timeout")
        try:
            self.repl_timeout_s = float(self.config.repl_timeout_s if timeout is None else timeout)
        except (TypeError, ValueError):
            raise ConfigError(
                f"extras['repl_timeout'] must be a number of seconds, got {timeout!r}"
            ) from None
        if not self.repl_timeout_s > 0:
            raise ConfigError(f"extras['repl_timeout'] must be > 0, got {timeout!r}")
        self.lm_callback = _callback(self.extras, "lm_callback")
        self.subcall_fn = _callback(self.extras, "subcall_fn")
        if self.subcall_fn is not None and self.lm_callback is None:
            raise ConfigError(
                "extras['subcall_fn'] needs extras['lm_callback'] too: the REPL's LM functions "
                "(llm_query, rlm_query, ...) exist only with an lm_callback"
            )
        self.depth = int(self.extras.get("depth") or 0)
        self.repl: SandboxREPL | None = None
        self._context: Any = None
        self._root_prompt = ""
        self._tools: dict[str, tuple[Any, str | None]] = {}
        self._final_answer: str | None = None
        self._reward = 0.0

    # ----------------------------------------------------------------- hooks
    def _get_reward(self, final_answer: str) -> float:
        """Score the final answer (override). Called only when the episode has one; the turn
        limit without an answer scores 0 without calling it."""
        return 1.0 if final_answer else 0.0

    def _get_system_prompt(self) -> str:
        """The system prompt template (override); ``{custom_tools_section}`` is filled in."""
        return DEFAULT_RLM_SYSTEM_PROMPT

    def _get_repl_tools(self) -> dict[str, Any]:
        """Task-specific REPL helpers, ``{name: function_or_value}`` (override)."""
        return {}

    # ----------------------------------------------------------------- episode
    def setup(self) -> None:
        """Start the REPL's worker process (idempotent; ``init`` calls it too)."""
        if self.repl is None:
            cpu = self.repl_timeout_s * (self.max_turns + 1) + 60
            self.repl = SandboxREPL(timeout_s=self.repl_timeout_s, config=self.config, cpu_budget_s=cpu)
        self.repl.start()

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Load the context into the REPL; return the system prompt, the context's
        description and the first turn prompt."""
        self.setup()
        assert self.repl is not None
        self._root_prompt = _prompt_text(prompt)
        self._context = _context_of(self.extras, self._root_prompt)
        self._tools = self._tool_entries(self._get_repl_tools() or {})
        functions = {name: value for name, (value, _) in self._tools.items() if callable(value)}
        values = {name: value for name, (value, _) in self._tools.items() if not callable(value)}
        if self.lm_callback is not None:
            functions.update(lm_functions(self.lm_callback, self.subcall_fn))
        self.repl.load(self._context, functions=functions, values=values)
        self.turns = 0
        self._final_answer, self._reward = None, 0.0
        section = tools_section(lm=self.lm_callback is not None, tools=self._tools)
        system = self._get_system_prompt().replace("{custom_tools_section}", section)
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": format_context_metadata(self._context)},
            turn_prompt(self._root_prompt, first=True),
        ]
        return messages, {}

    @staticmethod
    def _tool_entries(tools: Mapping[str, Any]) -> dict[str, tuple[Any, str | None]]:
        entries: dict[str, tuple[Any, str | None]] = {}
        for name, entry in tools.items():
            if name in RESERVED_NAMES:
                raise ConfigError(
                    f"REPL tool {name!r} uses a reserved name; reserved: {sorted(RESERVED_NAMES)}"
                )
            if isinstance(entry, Mapping) and "tool" in entry:
                description = entry.get("description")
                entries[name] = (entry["tool"], description if isinstance(description, str) else None)
            else:
                entries[name] = (entry, None)
        return entries

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Run the turn's last repl block; end on ``FINAL``/``FINAL_VAR`` or the turn limit."""
        if self.repl is None:
            raise EnvContractError("step() was called before init()")
        self.turns += 1
        at_limit = self.turns >= self.max_turns
        code = find_code_block(action)
        result = self.repl.execute(code) if code is not None else None
        answer = result.final_answer if result is not None else None
        if answer is None:
            answer = self._answer_in_text(action)
        if answer is not None:
            self._final_answer = answer
            self._reward = float(self._get_reward(answer))
            return BaseTextEnvStepOutput(
                observations=[],
                reward=self._reward,
                done=True,
                metadata={"final_answer": answer},
                truncated=False,
            )
        if result is None:
            return self._output(NO_BLOCK_MESSAGE, at_limit, {"error": "no_repl_block"})
        metadata: dict[str, Any] = {"error": result.error_kind} if result.error_kind else {}
        if result.restarted:
            metadata["repl_restarted"] = True
        if at_limit:
            return BaseTextEnvStepOutput(
                observations=[], reward=0.0, done=True, metadata=metadata, truncated=True
            )
        text = format_observation(code or "", result, self.config.max_output_chars)
        return self._output(text, False, metadata)

    def _answer_in_text(self, action: str) -> str | None:
        """The answer the turn's text gives: ``FINAL_VAR(name)`` (looked up in the REPL; a
        missing variable is no answer, and ``FINAL`` is then not read), else ``FINAL(...)``."""
        name = find_final_var(action)
        if name is not None:
            assert self.repl is not None
            return self.repl.final_var(name)
        return find_final(action)

    def _output(self, text: str, done: bool, metadata: dict[str, Any]) -> BaseTextEnvStepOutput:
        observations = [{"role": "user", "content": text}]
        if not done and self.config.turn_prompts != "none":
            quote = self.config.turn_prompts == "full"
            observations.append(turn_prompt(self._root_prompt, first=False, quote=quote))
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=0.0,
            done=done,
            metadata=metadata,
            truncated=True if done else None,
        )

    # ----------------------------------------------------------------- the rest
    def get_metrics(self) -> dict[str, Any]:
        """``turns_used``, ``final_value_set``, ``final_answer``, ``reward`` (published) and
        ``repl_restarts`` (workers replaced after timeouts or crashes)."""
        return {
            "turns_used": self.turns,
            "final_value_set": self._final_answer is not None,
            "final_answer": self._final_answer,
            "reward": self._reward,
            "repl_restarts": self.repl.restarts if self.repl is not None else 0,
        }

    def close(self) -> None:
        """End the REPL's worker and remove its sandbox. Idempotent."""
        repl, self.repl = self.repl, None
        if repl is not None:
            repl.close()


def _ground_truths(extras: Mapping[str, Any]) -> tuple[str, ...]:
    truth = ground_truth(
        extras,
        "the rlm env needs extras={'reward_spec': {'ground_truth': <answer>}} "
        "(a string, or a list of accepted answers)",
    )
    if isinstance(truth, (list, tuple)):
        if not truth:
            raise ConfigError("extras['reward_spec']['ground_truth'] is an empty list")
        return tuple(str(t) for t in truth)
    return (str(truth),)


class RLMEnv(BaseRLMEnv):
    """The ``rlm`` env: reward 1.0 when the final answer equals
    ``extras["reward_spec"]["ground_truth"]`` (or one of a list of them) after whitespace and
    case normalisation (:func:`normalize_answer`), else 0.0."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__(env_config, extras)
        self.ground_truths = _ground_truths(self.extras)

    def _get_reward(self, final_answer: str) -> float:
        answer = normalize_answer(final_answer)
        return 1.0 if any(answer == normalize_answer(t) for t in self.ground_truths) else 0.0

    @classmethod
    def example(cls) -> EnvExample:
        context = (
            "Shipping log.\nCrate 17 went to Lisbon.\nCrate 18 went to Oslo.\n"
            "Crate 19 went to Quito.\nThe password for crate 18 is heron-42.\n"
        )
        return EnvExample(
            extras={
                "extra_info": {"context_text": context},
                "reward_spec": {"method": "rule", "ground_truth": "heron-42"},
                "max_turns": 6,
                "repl_timeout": 10,
            },
            prompt=({"role": "user", "content": "What is the password for the crate that went to Oslo?"},),
            good_actions=(
                "```repl\nline = [l for l in context.splitlines() if 'password' in l][0]\nprint(line)\n```",
                "```repl\nanswer = line.split()[-1].rstrip('.')\n```\nFINAL_VAR(answer)",
            ),
        )
