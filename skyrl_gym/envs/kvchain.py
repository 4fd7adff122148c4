"""``kvchain``: follow a chain of keys through a hidden table; k lookups are needed by construction.

The prompt names a start key. The model looks keys up with a Hermes-style tool call::

    <tool_call>{"name": "lookup", "arguments": {"key": "k7qz"}}</tool_call>

and gets ``<tool_response>next key: m3xa</tool_response>``. After ``k`` lookups (``k`` from 3 to 8,
mixed) a value reads ``answer: 5163``; the model replies ``<answer>5163</answer>``. Reward 1.0 for
the right answer (the text in the tags, stripped, equal to the answer), else 0; with
``hop_reward`` > 0 each hop followed also earns that much (shaping, off by default). The episode
ends at the answer or at ``max_turns`` (``k + 2``: the ``k + 1`` turns a perfect policy needs and
one to spare).

Distractors: some values on the chain also name an ``old key`` (``old key: t3ny; next key:
b5sa``, the two fields in random order). An old key exists in the table and starts a plausible
wrong path (one to three more ``next key`` values) that ends in a wrong answer, so a policy that
copies the wrong key of an observation answers wrongly. A key that is not in the table gives an
error observation; every model mistake is an observation, never an exception.

Chance level: keys are fresh random strings of 4 lowercase letters and digits (at least one of
each; about 606,000 possible keys per split), and the answer is a number drawn uniformly from
1000-9999, never one that appears in the prompt (its worked examples included) nor another answer
of the table. Nothing before the last observation of the chain tells the answer: a policy that
answers without reading it is right with probability at most about 1/9000 (1.1e-4) per episode,
and it cannot reach the end without k lookups, since the key of hop i + 1 is only written in the
value of hop i (guessing an unseen key hits a given one with probability about 1.7e-6).

Metrics. Each step's ``metadata`` holds ``hop_followed``: True when the turn looked up the next
key of the chain, the one the latest chain value (or, for the first hop, the prompt) names, so a
lookup of an old key, an unknown key, or a chain key already read is not a hop followed; also
``key`` (the key looked up, None without a readable lookup), ``hops_followed`` (so far) and
``error`` on a mistake. ``get_metrics()``: ``hops_followed`` (0..k), ``hops_needed`` and ``k`` (the
chain length), ``success``, ``answered``, ``lookups``, ``decoy_lookups`` (old-key paths entered or
walked), ``unknown_lookups``, and ``success_k<k>`` (averaged over the episodes of each k, so the
aggregate gives the success per k).

Splits: a row's instance is drawn from ``random.Random(f"skyrl-kvchain-{split}-{seed}-{i}")``,
and every key is kept only when :func:`skyrl_gym.envs._generated.split_of` puts it in the row's
split (the CRC-32 of ``kvchain:<key>`` is even for train, odd for test), so no held-out key,
hence no held-out chain, ever appears in training rows under any seeds. Row ``i`` has
``k = hops[i % len(hops)]`` (its ``k`` field; ``skyrl train`` spreads the ks evenly through
training).

``env_config`` keys (all optional; an unknown key raises ``ConfigError``): ``examples`` (worked
example episodes in the prompt, 0 to 3; when set the env writes the prompt itself: the system
prompt, that many examples, the row's question; unset: the row's prompt, which for bundled rows
has 1), ``max_turns`` (``k + 2``; a row's ``max_turns`` wins), ``hop_reward`` (0.0), and the
difficulty: ``hops`` (an int, a list such as ``[3, 4]``, or a range ``"3-5"``) and
``distractors`` (old-key branches per chain, 0 to 8, at most one per chain value; bundled rows
have 2). Setting either makes the env draw its instance anew from the row's ``seed`` and
``split`` (deterministic, still in the row's split) with ``k = hops[crc32(seed) % len(hops)]``,
and rename the start key in the question.
"""

from __future__ import annotations

import json
import random
import re
import string
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_gym.config import config_get
from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs._generated import check_config_keys, check_split, config_int, split_of
from skyrl_gym.errors import ConfigError
from skyrl_gym.tools import ToolContext, ToolGroup, call_tools, tool
from skyrl_gym.types import BaseTextEnvStepOutput, EnvExample

__all__ = [
    "KVChainEnv",
    "KVTable",
    "generate_kvchain_rows",
    "make_kvchain_instance",
    "build_kvchain_prompt",
    "HOPS",
    "SYSTEM_PROMPT",
]

HOPS = (3, 4, 5, 6, 7, 8)
"""The chain lengths of the bundled rows, in turn (row ``i`` has ``HOPS[i % 6]``)."""
DISTRACTORS = 2
"""Old-key branches per chain in the bundled rows."""
MAX_DISTRACTORS = 8
KEY_LENGTH = 4

SYSTEM_PROMPT = (
    "You can look up keys in a table. To look up a key, reply with exactly one tool call:\n"
    '<tool_call>{"name": "lookup", "arguments": {"key": "<key>"}}</tool_call>\n'
    "You will get <tool_response>value</tool_response>. A value names the next key to look up as "
    '"next key: ..."; ignore any "old key". When a value says "answer: ...", reply with '
    "<answer>...</answer>."
)

# The worked example episodes: (start key, the values read along the chain, in order, answer).
# Their keys and answers never occur in generated instances. How many go into a prompt is the
# `examples` setting: with three worked examples of a plain chain (no old keys) the bundled
# model already followed 2-6 hops with 0.55-0.62 success (issue 45), above the 5-40% band a
# baseline should fall in; the bundled rows have one.
_EXAMPLES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("p4ta", ("next key: h2wo; old key: x9fe", "next key: r7ub", "answer: 5163"), "5163"),
    (
        "m8ck",
        ("old key: t3ny; next key: b5sa", "next key: q1jd", "next key: w6lo; old key: e2gv", "answer: 2740"),
        "2740",
    ),
    ("z9re", ("next key: c4hu", "old key: n7pi; next key: f0ya", "old key: u5mk; answer: 8391"), "8391"),
)
_QUESTIONS = (
    "Start at key {key}. Follow the chain of next keys and give the answer.",
    "The chain starts at key {key}. What is the answer at its end?",
    "Look up key {key}, follow the next keys, and report the answer.",
)
_KEY_CHARS = string.ascii_lowercase + string.digits
_NEXT_RE = re.compile(r"(?:^|;)\s*next key:\s*([a-z0-9]+)\s*(?:;|$)")
_ANSWER_FIELD_RE = re.compile(r"(?:^|;)\s*answer:\s*([^;]+?)\s*(?:;|$)")
_ANSWER_RE = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)
_MAX_KEY = 100


def _lookup_call(key: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'lookup', 'arguments': {'key': key}})}</tool_call>"


def _example_messages(count: int) -> list[dict[str, str]]:
    messages = []
    for start, values, answer in _EXAMPLES[:count]:
        messages.append({"role": "user", "content": _QUESTIONS[0].format(key=start)})
        key = start
        for value in values:
            messages += [
                {"role": "assistant", "content": _lookup_call(key)},
                {"role": "user", "content": f"<tool_response>{value}</tool_response>"},
            ]
            nxt = _NEXT_RE.search(value)
            key = nxt.group(1) if nxt else key
        messages.append({"role": "assistant", "content": f"<answer>{answer}</answer>"})
    return messages


def _example_keys() -> set[str]:
    keys = set()
    for start, values, _ in _EXAMPLES:
        keys.add(start)
        for value in values:
            keys.update(re.findall(r"key:\s*([a-z0-9]+)", value))
    return keys


# every text a prompt can hold, examples included: generated answers never occur in it
_PROMPT_TEXT = "\n".join(
    [SYSTEM_PROMPT, *_QUESTIONS, *(m["content"] for m in _example_messages(len(_EXAMPLES)))]
)
_RESERVED_KEYS = frozenset(_example_keys())


def build_kvchain_prompt(start_key: str, *, examples: int = 1, phrasing: int = 0) -> list[dict[str, str]]:
    """The prompt of a chain starting at ``start_key``: the system prompt, ``examples`` worked
    example episodes (0 to 3) and the question (``phrasing`` picks one of three wordings)."""
    if not 0 <= examples <= len(_EXAMPLES):
        raise ConfigError(f"examples must be from 0 to {len(_EXAMPLES)}, got {examples}")
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        *_example_messages(examples),
        {"role": "user", "content": _QUESTIONS[phrasing % len(_QUESTIONS)].format(key=start_key)},
    ]


def _new_key(r: random.Random, split: str, taken: set[str]) -> str:
    while True:
        key = "".join(r.choice(_KEY_CHARS) for _ in range(KEY_LENGTH))
        if (
            key not in taken
            and any(c.isdigit() for c in key)
            and any(c.isalpha() for c in key)
            and split_of(f"kvchain:{key}") == split
        ):
            taken.add(key)
            return key


def _new_answer(r: random.Random, taken: set[str]) -> str:
    while True:
        answer = str(r.randint(1000, 9999))
        if answer not in taken and answer not in _PROMPT_TEXT:
            taken.add(answer)
            return answer


def make_kvchain_instance(
    seed: str, split: str, k: int, distractors: int = DISTRACTORS
) -> tuple[str, dict[str, str], str]:
    """One chain of ``k`` hops, drawn from ``random.Random(seed)`` with keys of ``split`` only:
    ``(start key, table, answer)``. The table holds the ``k`` chain values and ``distractors``
    old-key branches (at most one per chain value), each 1-3 values ending in a wrong answer."""
    check_split(split)
    if k < 1:
        raise ConfigError(f"a chain needs at least 1 hop, got k={k}")
    if not 0 <= distractors <= MAX_DISTRACTORS:
        raise ConfigError(f"distractors must be from 0 to {MAX_DISTRACTORS}, got {distractors}")
    r = random.Random(seed)
    taken = set(_RESERVED_KEYS)
    answers: set[str] = set()
    chain = [_new_key(r, split, taken) for _ in range(k)]
    answer = _new_answer(r, answers)
    branched = set(r.sample(range(k), min(distractors, k)))
    table: dict[str, str] = {}
    for i, key in enumerate(chain):
        fields = [f"next key: {chain[i + 1]}" if i + 1 < k else f"answer: {answer}"]
        if i in branched:
            branch = [_new_key(r, split, taken) for _ in range(r.randint(1, 3))]
            wrong = _new_answer(r, answers)
            for j, decoy in enumerate(branch):
                table[decoy] = f"next key: {branch[j + 1]}" if j + 1 < len(branch) else f"answer: {wrong}"
            fields.insert(r.randint(0, 1), f"old key: {branch[0]}")
        table[key] = "; ".join(fields)
    items = list(table.items())
    r.shuffle(items)
    return chain[0], dict(items), answer


def generate_kvchain_rows(
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    hops: Sequence[int] = HOPS,
    distractors: int = DISTRACTORS,
    examples: int = 1,
) -> list[dict[str, Any]]:
    """``n`` chains; row ``i`` has ``k = hops[i % len(hops)]`` and is drawn from the seed string
    ``skyrl-kvchain-{split}-{seed}-{i}`` with keys of ``split`` only (train and test share no
    key). ``examples``: worked example episodes in each prompt (0 to 3)."""
    check_split(split)
    hops = tuple(int(k) for k in hops)
    if not hops:
        raise ConfigError("hops must name at least one chain length")
    rows = []
    for i in range(n):
        k = hops[i % len(hops)]
        instance_seed = f"skyrl-kvchain-{split}-{seed}-{i}"
        start, table, answer = make_kvchain_instance(instance_seed, split, k, distractors)
        rows.append(
            {
                "id": f"kvchain-{split}-{seed}-{i:05d}",
                "k": k,
                "seed": instance_seed,
                "split": split,
                "distractors": distractors,
                "start_key": start,
                "table": table,
                "prompt": build_kvchain_prompt(start, examples=examples, phrasing=i),
                "env_class": "kvchain",
                "reward_spec": {"method": "rule", "ground_truth": answer},
                "data_source": "skyrl/kvchain",
            }
        )
    return rows


def _follow(table: Mapping[str, str], start: str) -> tuple[list[str], str]:
    """The chain from ``start`` (its keys in order) and the answer at its end."""
    chain: list[str] = []
    key = start
    while len(chain) <= len(table):
        if key not in table:
            raise ConfigError(f"kvchain table has no key {key!r} on the chain from {start!r}")
        chain.append(key)
        value = str(table[key])
        answer = _ANSWER_FIELD_RE.search(value)
        if answer is not None:
            return chain, answer.group(1)
        nxt = _NEXT_RE.search(value)
        if nxt is None:
            raise ConfigError(
                f"kvchain value {value!r} of key {key!r} has neither 'next key: ' nor 'answer: '"
            )
        key = nxt.group(1)
    raise ConfigError(f"the kvchain chain from {start!r} loops without reaching an answer")


def _parse_hops(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*-\s*\d+\s*", value):
        lo, hi = (int(x) for x in value.split("-"))
        ks = tuple(range(lo, hi + 1))
    elif isinstance(value, str) and value.strip().isdigit():
        ks = (int(value),)
    elif isinstance(value, int) and not isinstance(value, bool):
        ks = (value,)
    elif isinstance(value, Sequence) and not isinstance(value, str):
        ks = tuple(value)
    else:
        ks = ()
    if not ks or not all(isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= 32 for k in ks):
        raise ConfigError(
            f"env_config 'hops' must be an int, a list of ints or 'LO-HI', from 1 to 32; got {value!r}"
        )
    return ks


class KVTable(ToolGroup):
    """The ``lookup`` tool over one episode's table; remembers the keys asked, in order."""

    def __init__(self, table: Mapping[str, str]) -> None:
        super().__init__(name="kvchain")
        self.table = dict(table)
        self.keys_asked: list[str] = []

    @tool
    def lookup(self, key: str) -> str:
        """Look up a key in the table and return its value.

        Args:
            key: The key, e.g. "k7qz".
        """
        key = key.strip()[:_MAX_KEY]
        self.keys_asked.append(key)
        if key not in self.table:
            raise LookupError(f"no key {key[:40]!r} in the table")
        return self.table[key]


_CONFIG_KEYS = ("examples", "max_turns", "hop_reward", "hops", "distractors")


class KVChainEnv(BaseTextEnv):
    """Follow ``k`` keys through a table with a ``lookup`` tool, then ``<answer>...</answer>``."""

    bundled_stratify_by = "k"

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras)
        check_config_keys(env_config, _CONFIG_KEYS, "kvchain")
        table, start = self.extras.get("table"), self.extras.get("start_key")
        if not isinstance(table, Mapping) or not isinstance(start, str):
            raise ConfigError(
                "kvchain needs extras with 'table' (key -> value) and 'start_key'; "
                "rows from generate_kvchain_rows() have them"
            )
        self.examples = config_int(env_config, "examples", None, 0, len(_EXAMPLES))
        self.renamed: tuple[str, str] | None = None
        hops = _parse_hops(config_get(env_config, "hops", None))
        distractors = config_int(env_config, "distractors", None, 0, MAX_DISTRACTORS)
        if hops is not None or distractors is not None:
            start, table = self._draw_again(start, hops, distractors)
        self.chain, self.answer = _follow(table, start)
        truth = (self.extras.get("reward_spec") or {}).get("ground_truth")
        if self.renamed is None and truth is not None and str(truth) != self.answer:
            raise ConfigError(
                f"kvchain row's reward_spec ground_truth {truth!r} is not the answer "
                f"{self.answer!r} at the end of its chain"
            )
        self.k = len(self.chain)
        self.max_turns = int(self.extras.get("max_turns", config_get(env_config, "max_turns", self.k + 2)))
        self.hop_reward = float(config_get(env_config, "hop_reward", 0.0))
        self.tools = KVTable(table)
        self.init_tool_groups([self.tools])
        self.decoys = frozenset(table) - frozenset(self.chain)
        self.hops_followed = 0
        self.lookups = self.decoy_lookups = self.unknown_lookups = 0
        self.answered = self.correct = False

    def _draw_again(
        self, start: str, hops: tuple[int, ...] | None, distractors: int | None
    ) -> tuple[str, dict[str, str]]:
        """A new instance from the row's seed and split with the configured difficulty."""
        seed, split = self.extras.get("seed"), self.extras.get("split")
        if not isinstance(seed, str) or split not in ("train", "test"):
            raise ConfigError(
                "env_config 'hops'/'distractors' draw the chain anew from the row's 'seed' and "
                "'split' fields; this row has none (rows from generate_kvchain_rows() do)"
            )
        if hops is None:
            hops = (int(self.extras.get("k") or len(_follow(self.extras["table"], start)[0])),)
        if distractors is None:
            distractors = int(self.extras.get("distractors", DISTRACTORS))
        k = hops[zlib.crc32(seed.encode("utf-8")) % len(hops)]
        new_start, table, _ = make_kvchain_instance(seed, split, k, distractors)
        self.renamed = (start, new_start)
        return new_start, table

    @classmethod
    def bundled_rows(cls, split: str = "train", n: int = 0, seed: int = 0) -> list[dict[str, Any]]:
        """Generated chains (400 when ``n`` is 0), k = 3..8 in turn; train and test keys are
        disjoint (module docstring)."""
        check_split(split)
        return generate_kvchain_rows(n or 400, split=split, seed=seed)

    @classmethod
    def example(cls) -> EnvExample:
        row = generate_kvchain_rows(1, split="test")[0]
        chain, answer = _follow(row["table"], row["start_key"])
        extras = {
            key: row[key]
            for key in ("k", "seed", "split", "distractors", "start_key", "table", "reward_spec")
        }
        return EnvExample(
            extras=extras,
            prompt=tuple(row["prompt"]),
            good_actions=(*(_lookup_call(key) for key in chain), f"<answer>{answer}</answer>"),
        )

    def init(self, prompt: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        messages = [dict(m) for m in prompt] if isinstance(prompt, list | tuple) else []
        if self.renamed is not None:
            old, new = self.renamed
            if messages and old in str(messages[-1].get("content", "")):
                messages[-1]["content"] = str(messages[-1]["content"]).replace(old, new)
            else:
                messages.append({"role": "user", "content": _QUESTIONS[0].format(key=new)})
        if self.examples is not None:
            question = (
                messages[-1]
                if messages
                else {"role": "user", "content": _QUESTIONS[0].format(key=self.chain[0])}
            )
            messages = [
                {"role": "system", "content": SYSTEM_PROMPT},
                *_example_messages(self.examples),
                question,
            ]
        return messages, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        answer = _ANSWER_RE.search(action)
        if answer is not None:
            self.answered = True
            self.correct = answer.group(1).strip() == self.answer
            meta = {"answer": answer.group(1)[:100], "correct": self.correct, "hop_followed": False}
            meta["hops_followed"] = self.hops_followed
            return BaseTextEnvStepOutput(
                observations=[],
                reward=1.0 if self.correct else 0.0,
                done=True,
                metadata=meta,
                truncated=False,
            )
        asked = len(self.tools.keys_asked)
        # one lookup a turn; the table is in memory, so the tool runs on this thread (no deadline)
        results = call_tools(
            self.tool_groups, action, "hermes", context=ToolContext(env=self), timeout=None, max_calls=1
        )[:1]
        key = self.tools.keys_asked[-1] if len(self.tools.keys_asked) > asked else None
        followed = False
        meta: dict[str, Any] = {"key": key}
        if results:
            result = results[0]
            meta["tool_call"] = {"name": result.name, "error": result.error}
            if not result.ok:
                meta["error"] = result.error
            if key is not None:
                self.lookups += 1
                if result.ok and self.hops_followed < self.k and key == self.chain[self.hops_followed]:
                    followed = True
                    self.hops_followed += 1
                elif key in self.decoys:
                    self.decoy_lookups += 1
                elif not result.ok:
                    self.unknown_lookups += 1
            content = f"<tool_response>{result.content}</tool_response>"
        else:
            meta["error"] = "no_tool_call"
            content = "Reply with a <tool_call> or an <answer>."
        meta["hop_followed"] = followed
        meta["hops_followed"] = self.hops_followed
        done = self.turns >= self.max_turns
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": content}],
            reward=self.hop_reward if followed else 0.0,
            done=done,
            metadata=meta,
            truncated=done,
        )

    def get_metrics(self) -> dict[str, Any]:
        return {
            "success": self.correct,
            "answered": self.answered,
            "k": self.k,
            "hops_needed": self.k,
            "hops_followed": self.hops_followed,
            "lookups": self.lookups,
            "decoy_lookups": self.decoy_lookups,
            "unknown_lookups": self.unknown_lookups,
            f"success_k{self.k}": self.correct,
        }
