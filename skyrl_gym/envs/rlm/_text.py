"""What the model reads and writes in the ``rlm`` envs: prompts, observations, parsing.

The prompt and observation texts are the published RLM env's prompt format (a model trained
on one reads the other the same way). The parsers find what the published regular expressions
find, in linear time: those patterns (``^\\s*FINAL\\(`` with ``re.MULTILINE``, a lazy
```` ```repl ```` block) take quadratic time on some inputs (a megabyte of newlines, many
unclosed fences), and the action is the model's text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.rlm.types import REPLResult

__all__ = [
    "DEFAULT_RLM_SYSTEM_PROMPT",
    "NO_BLOCK_MESSAGE",
    "find_code_block",
    "find_final",
    "find_final_var",
    "format_context_metadata",
    "format_observation",
    "format_result",
    "tools_section",
    "turn_prompt",
]

DEFAULT_RLM_SYSTEM_PROMPT = """\
You are tasked with answering a query with associated context. You can access, transform, and analyze this context interactively in a REPL environment. You will be queried iteratively until you provide a final answer.

The REPL environment is initialized with:
1. A `context` variable that contains extremely important information about your query. You should check the content of the `context` variable to understand what you are working with. Make sure you look through it sufficiently as you answer your query.
2. A `SHOW_VARS()` function that returns all variables you have created in the REPL. Use this to check what variables exist before using FINAL_VAR.
3. The ability to use `print()` statements to view the output of your REPL code and continue your reasoning.
{custom_tools_section}
When you want to execute Python code in the REPL environment, wrap it in triple backticks with 'repl' language identifier:
```repl
# your code here
```

Use variables as buffers to build up your final answer. Make sure to explicitly look through the context in the REPL before answering your query.

IMPORTANT: When you are done with the iterative process, you MUST provide a final answer using one of:
1. FINAL(your final answer here) — provide the answer directly as text
2. FINAL_VAR(variable_name) — return a variable you have created in the REPL

WARNING: FINAL_VAR retrieves an EXISTING variable. You MUST create and assign the variable in a ```repl``` block FIRST, then call FINAL_VAR in a SEPARATE response.

Think step by step carefully, plan, and execute this plan immediately in your response -- do not just say "I will do this". Output to the REPL environment as much as possible.\
"""
"""The published system prompt; ``{custom_tools_section}`` becomes the list of LM query
functions and REPL tools (empty without them)."""

#: The observation of a turn without a ```` ```repl ```` block (``\\n`` is literal, as published).
NO_BLOCK_MESSAGE = "[No ```repl``` code block found. Wrap your code in ```repl\\n...\\n``` blocks.]"

_FIRST_TURN = (
    "You have not interacted with the REPL environment or seen your prompt / context yet. "
    "Your next action should be to look through and figure out how to answer the prompt, "
    "so don't just provide a final answer yet.\n\n"
)
_LATER_TURN = "The history before is your previous interactions with the REPL environment. "
_ASK = "Think step-by-step on what to do using the REPL environment (which contains the context) to answer the prompt.\n\n"
_ASK_QUOTING = (
    "Think step-by-step on what to do using the REPL environment (which contains the context) "
    'to answer the original prompt: "{root_prompt}".\n\n'
)
_CONTINUE = (
    "Continue using the REPL environment, which has the `context` variable, "
    "by writing to a ```repl``` tag, and determine your answer. Your next action:"
)
_LM_SECTION = (
    "\n4. LM query tools available in the REPL:\n"
    "- `llm_query(prompt)` — make a direct LLM call, returns str\n"
    "- `llm_query_batched(prompts)` — batch LLM calls, returns list[str]\n"
    "- `rlm_query(prompt)` — recursive LM call that spawns a child agent with its own REPL, returns str\n"
    "- `rlm_query_batched(prompts)` — batch recursive calls in parallel, returns list[str]"
)


def turn_prompt(root_prompt: str, *, first: bool, quote: bool = True) -> dict[str, str]:
    """The user message before a model turn: the first one warns that nothing was seen yet;
    ``quote`` repeats the original prompt (``root_prompt``, when not empty)."""
    ask = _ASK_QUOTING.format(root_prompt=root_prompt) if quote and root_prompt else _ASK
    return {"role": "user", "content": (_FIRST_TURN if first else _LATER_TURN) + ask + _CONTINUE}


def format_context_metadata(context: Any) -> str:
    """The message that describes the context: its type, size and the lengths of its chunks
    (the values of a dict, the items of a list)."""
    if isinstance(context, str):
        kind, lengths = "str", [len(context)]
    elif isinstance(context, dict):
        kind, lengths = "dict", [_chunk_len(v) for v in context.values()]
    elif isinstance(context, list):
        kind, lengths = "list", [len(str(item)) for item in context]
    else:
        kind, lengths = type(context).__name__, [len(repr(context))]
    return (
        f"Your context is a {kind} with {sum(lengths)} total characters, "
        f"and is broken up into chunks of char lengths: {lengths}."
    )


def _chunk_len(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    try:
        return len(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        return len(repr(value))


def tools_section(*, lm: bool, tools: Mapping[str, tuple[Any, str | None]]) -> str:
    """The ``{custom_tools_section}`` of the system prompt: the LM query functions (``lm``) and
    the REPL tools, ``{name: (value, description or None)}``."""
    text = _LM_SECTION if lm else ""
    lines = []
    for name, (value, description) in tools.items():
        if description:
            lines.append(f"- `{name}`: {description}")
        elif callable(value):
            lines.append(f"- `{name}`: A custom function")
        else:
            lines.append(f"- `{name}`: A custom {type(value).__name__} value")
    if lines:
        text += f"\n{5 if lm else 4}. Custom tools and data available in the REPL:\n" + "\n".join(lines)
    return text


# --------------------------------------------------------------------------- parsing
_FENCE = "```repl"
_CLOSE = "\n```"
_FINAL_VAR_START = re.compile(r"^[^\S\n]*FINAL_VAR\(", re.MULTILINE)
_FINAL_START = re.compile(r"^[^\S\n]*FINAL\(", re.MULTILINE)
_LINE_END_PAREN = re.compile(r"\)(?=[^\S\n]*(?:\n|\Z))")


def find_code_block(text: str) -> str | None:
    """The code of the last ```` ```repl ```` block (stripped), or None.

    A block is the fence, whitespace that holds a newline, the code, and a newline followed
    by three backticks; the code starts after the last newline of that whitespace."""
    last = None
    pos = 0
    n = len(text)
    while True:
        start = text.find(_FENCE, pos)
        if start < 0:
            return last
        i = start + len(_FENCE)
        newline, newlines = -1, 0
        while i < n and text[i].isspace():
            if text[i] == "\n":
                newline, newlines = i, newlines + 1
            i += 1
        if newline < 0:  # no newline after the fence: not a block here
            pos = start + 1
            continue
        end = text.find(_CLOSE, newline + 1)
        if end < 0:
            if newlines >= 2 and text.startswith("```", newline + 1):
                # the code may also start after an earlier newline of the whitespace: an empty
                # block whose closing fence is the whitespace's last newline
                last, pos = "", newline + len(_CLOSE)
                continue
            return last  # no closing fence after this one: none after any later fence either
        last = text[newline + 1 : end].strip()
        pos = end + len(_CLOSE)


def find_final_var(text: str) -> str | None:
    """The argument of the last ``FINAL_VAR(...)`` that starts a line (up to the first ``)``),
    stripped of whitespace and quotes: the name of the variable to answer with, or None."""
    found = None
    pos = 0
    while (m := _FINAL_VAR_START.search(text, pos)) is not None:
        close = text.find(")", m.end())
        if close < 0:
            break
        found = text[m.end() : close]
        pos = close + 1
    if found is None:
        return None
    # stripped as published: by the parser, then again by FINAL_VAR in the REPL
    return found.strip().strip('"').strip("'").strip().strip("\"'")


def find_final(text: str) -> str | None:
    """The answer of ``FINAL(...)``: from the first ``FINAL(`` that starts a line to the last
    ``)`` that ends one (stripped), or None."""
    m = _FINAL_START.search(text)
    if m is None:
        return None
    close = None
    for close_m in _LINE_END_PAREN.finditer(text, m.end()):
        close = close_m.start()
    if close is None:
        return None
    return text[m.end() : close].strip()


# --------------------------------------------------------------------------- observations
def format_result(result: REPLResult, max_chars: int) -> str:
    """The ``REPL output`` part of an observation: stdout, stderr, the variables; cut to
    ``max_chars`` with a count of what was cut."""
    parts = []
    if result.stdout:
        parts.append(f"\n{result.stdout}")
    if result.stderr:
        parts.append(f"\n{result.stderr}")
    if result.variables:
        parts.append(f"REPL variables: {list(result.variables)}\n")
    text = "\n\n".join(parts) if parts else "No output"
    full = len(text) + result.dropped_chars
    if full > max_chars:
        text = text[:max_chars] + f"... + [{full - max_chars} chars...]"
    return text


def format_observation(code: str, result: REPLResult, max_chars: int) -> str:
    """The observation after a cell ran: the code, then its output."""
    return f"Code executed:\n```python\n{code}\n```\n\nREPL output:\n{format_result(result, max_chars)}"
