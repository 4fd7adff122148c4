"""Token-in token-out chat rendering: the first messages once, then only the new observations.

The runtime never re-tokenizes a conversation. :class:`ChatRenderer` turns

* the env's first messages into ``prompt_ids`` (the chat template applied once, with the
  generation prompt), and
* each later group of observation messages into the *delta* the template would add after the
  model's turn (for ChatML: ``<|im_end|>\\n<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n``,
  minus the ``<|im_end|>`` the model already sampled), appended with loss mask 0.

So the ids the trainer sees are the ids the policy was fed and sampled. :func:`check_tokenization`
compares those append-only ids with a fresh rendering of the whole conversation; for templates
that rewrite history (one that drops earlier ``<think>`` blocks, such as the shipped
``chatml_think``) they differ, the check reports where, and the runtime keeps the append-only ids.

Message *content* is always tokenized as plain text: an observation containing ``<|im_end|>`` or
``</tool_call>`` gets the ids of those characters, never the control token, so it cannot end a
turn or forge a tool call. Only the template's own text yields control tokens. (The renderer puts
a placeholder where each content goes, renders the template, and tokenizes the template's text
with special tokens and each content with ``split_special_tokens=True``. A template that rewrites
content, e.g. strips ``<think>``, is applied to the placeholder: the first messages and
observations are kept verbatim.)
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from skyrl_gym.errors import ConfigError

__all__ = [
    "ChatRenderer",
    "TokenizationReport",
    "check_tokenization",
    "shipped_template",
    "SHIPPED_TEMPLATES",
]

#: Texts up to this many characters have their ids cached by ``ChatRenderer.encode_text``.
_TEXT_CACHE_MAX_CHARS = 256
#: Most cached texts per renderer (the cache is emptied when full).
_TEXT_CACHE_ENTRIES = 8192

#: Templates shipped with the runtime (``skyrl_agent/templates/NAME.jinja``).
SHIPPED_TEMPLATES = ("chatml_tools", "chatml_think")

# Private-use code points mark where each message's content goes in a rendering.
_OPEN, _CLOSE = "\ue000", "\ue001"
#: The letter :meth:`ChatRenderer.encode_continued` puts after text that ends in whitespace.
_PROBE = "a"
_SLOT_RE = re.compile(f"{_OPEN}(\\d+){_CLOSE}")


def shipped_template(name: str) -> str:
    """The Jinja source of a shipped template (see :data:`SHIPPED_TEMPLATES`)."""
    if name not in SHIPPED_TEMPLATES:
        from skyrl_gym.errors import did_you_mean

        raise ConfigError(
            f"no shipped chat template {name!r}; have {SHIPPED_TEMPLATES}."
            + did_you_mean(name, SHIPPED_TEMPLATES)
        )
    return resources.files("skyrl_agent.templates").joinpath(f"{name}.jinja").read_text(encoding="utf-8")


class ChatRenderer:
    """Renders messages into token ids for one tokenizer and chat template.

    Args:
        tokenizer: a Hugging Face tokenizer.
        chat_template: ``None`` for the tokenizer's own template (or ``chatml_tools`` when tools
            are given and the own template has no tool support), a shipped template's name, or
            a Jinja source string.
    """

    def __init__(self, tokenizer: Any, chat_template: str | None = None) -> None:
        self.tokenizer = tokenizer
        own = getattr(tokenizer, "chat_template", None)
        if isinstance(own, dict):  # some tokenizers keep several named templates
            own = own.get("default") or next(iter(own.values()), None)
        if chat_template is None:
            if not own:
                chat_template = shipped_template("chatml_tools")
            self.template: str = chat_template or own
            self.tools_template: str = own if own and "tools" in own else shipped_template("chatml_tools")
        else:
            self.template = (
                shipped_template(chat_template) if chat_template in SHIPPED_TEMPLATES else chat_template
            )
            self.tools_template = self.template
        eos = tokenizer.eos_token_id
        self.eos_token_id: int | None = int(eos) if eos is not None else None
        self._eos_text = tokenizer.decode([eos]) if eos is not None else ""
        # The observation delta depends only on the messages' roles (and other non-content
        # fields), the tools and how the turn ended: render the template once per shape.
        self._delta_cache: dict[tuple[Any, ...], list[list[int] | int]] = {}
        self._plain = _plain_text_encoder(tokenizer)
        self._tools_keys: dict[int, tuple[Any, Any]] = {}
        self._closes: dict[int, bool] = {}
        self._token_texts: dict[int, str] = {}  # end-of-turn token id -> its text
        # Short observation texts repeat (error messages, "ok", the same tool output for every
        # sample of a GRPO group): their ids are kept, bounded, as tokenizing costs tens of us.
        self._text_ids: dict[str, list[int]] = {}
        self._probe_id: int | None = None  # the id of _PROBE alone (-1: it is not one token)

    # ------------------------------------------------------------------ rendering
    def _template_for(self, tools: Sequence[dict[str, Any]] | None) -> str:
        return self.tools_template if tools else self.template

    def render_text(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """The template applied to ``messages`` as text (content verbatim)."""
        return self.tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools) if tools else None,
            chat_template=self._template_for(tools),
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
        )

    def _render_slots(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        add_generation_prompt: bool,
    ) -> tuple[str, list[str]]:
        contents: list[str] = []
        slotted = []
        for message in messages:
            m = dict(message)
            if isinstance(m.get("content"), str):
                m["content"] = f"{_OPEN}{len(contents)}{_CLOSE}"
                contents.append(message["content"])
            slotted.append(m)
        return self.render_text(slotted, tools, add_generation_prompt), contents

    def _encode_slotted(self, text: str, contents: Sequence[str]) -> list[int]:
        ids: list[int] = []
        pos = 0
        for m in _SLOT_RE.finditer(text):
            if m.start() > pos:
                ids += self.tokenizer.encode(text[pos : m.start()], add_special_tokens=False)
            ids += self.encode_text(contents[int(m.group(1))])
            pos = m.end()
        if pos < len(text):
            ids += self.tokenizer.encode(text[pos:], add_special_tokens=False)
        return ids

    def encode_text(self, text: str) -> list[int]:
        """``text`` as plain-text ids: control-token lookalikes become ordinary characters."""
        if not text:
            return []
        cacheable = len(text) <= _TEXT_CACHE_MAX_CHARS
        if cacheable:
            hit = self._text_ids.get(text)
            if hit is not None:
                return list(hit)
        if self._plain is not None:
            ids = self._plain.encode(text, add_special_tokens=False).ids
        else:
            ids = self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        if cacheable:
            if len(self._text_ids) >= _TEXT_CACHE_ENTRIES:
                self._text_ids.clear()
            self._text_ids[text] = list(ids)
        return ids

    def encode_continued(self, text: str) -> list[int]:
        """``text``'s plain-text ids as they are when the same message goes on after it: an
        inline observation, which the model continues in its own turn.

        A byte-level BPE tokenizer cuts trailing whitespace differently at the end of a string
        than before a word: ``"</observation>\\n\\n"`` alone ends in the one token ``"\\n\\n"``,
        while in ``"</observation>\\n\\n<think>"`` (how a worked example in the prompt was
        tokenized, and how the model read such text in pretraining) the newlines are two tokens
        and ``<think>`` follows. Fed the first form, SmolLM2-135M-Instruct skipped ``<think>``
        or wrote no well-formed turn at all. So ``text`` ending in whitespace gets the ids of
        ``text + "a"`` without the last, where ``"a"`` stayed a token of its own (the ids before
        it then spell ``text`` exactly); otherwise, and where the letter merged (a trailing
        space joins the next word), the ids of ``text``."""
        if not text or not text[-1].isspace():
            return self.encode_text(text)
        if self._probe_id is None:
            probe = self.encode_text(_PROBE)
            self._probe_id = probe[0] if len(probe) == 1 else -1
        ids = self.encode_text(text + _PROBE)
        if self._probe_id >= 0 and len(ids) > 1 and ids[-1] == self._probe_id:
            return ids[:-1]
        return self.encode_text(text)

    def encode_prompt(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        """Ids of the first messages with the generation prompt (the episode's ``prompt_ids``)."""
        if not messages:
            raise ConfigError("the env's first messages are empty; init() must return at least one message")
        text, contents = self._render_slots(messages, tools, add_generation_prompt=True)
        return self._encode_slotted(text, contents)

    def encode_observation(
        self,
        observations: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        turn_ended_with_eos: bool = True,
        last_token_id: int | None = None,
    ) -> list[int]:
        """Ids to append after a model turn so the context continues with ``observations`` and
        the next generation prompt. ``turn_ended_with_eos`` says whether the turn's last sampled
        token was EOS (then the template's closing text starts with it and it is not repeated);
        a turn cut by a stop string or ``max_tokens`` gets the whole closing text. Pass
        ``last_token_id`` when the turn ended with another end-of-turn token (e.g. Llama 3's
        ``<|eot_id|>`` next to its EOS): its text is the one not repeated.
        """
        if last_token_id is not None:
            strip = ""
            if turn_ended_with_eos:
                strip = self._token_texts.get(last_token_id)
                if strip is None:
                    strip = self._token_texts[last_token_id] = self.tokenizer.decode([last_token_id])
        else:
            strip = self._eos_text if turn_ended_with_eos else ""
        key = (self._shape_key(observations), self._tools_key(tools), strip)
        parts = self._delta_cache.get(key)
        if parts is None:
            parts = self._delta_parts(observations, tools, strip)
            if len(self._delta_cache) < 4096:
                self._delta_cache[key] = parts
        contents = [m["content"] for m in observations if isinstance(m.get("content"), str)]
        ids: list[int] = []
        for part in parts:
            ids += self.encode_text(contents[part]) if isinstance(part, int) else part
        return ids

    @staticmethod
    def _shape_key(observations: Sequence[dict[str, Any]]) -> tuple[Any, ...]:
        # Fast path: plain {"role", "content"} messages are keyed by their roles alone.
        if all(len(m) == 2 and "role" in m and isinstance(m.get("content"), str) for m in observations):
            return tuple(m["role"] for m in observations)
        return tuple(
            tuple(sorted((k, _freeze(v)) for k, v in m.items() if k != "content" or not isinstance(v, str)))
            for m in observations
        )

    def _tools_key(self, tools: Sequence[dict[str, Any]] | None) -> Any:
        if not tools:
            return None
        hit = self._tools_keys.get(id(tools))
        if hit is not None and hit[0] is tools:
            return hit[1]
        if len(self._tools_keys) > 1024:
            self._tools_keys.clear()
        key = _freeze(tools)
        self._tools_keys[id(tools)] = (tools, key)
        return key

    def _delta_parts(
        self,
        observations: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        strip: str,
    ) -> list[list[int] | int]:
        """The observation delta as template ids and content slot numbers (rendered once)."""
        base = [{"role": "user", "content": "\ue002"}, {"role": "assistant", "content": "\ue003"}]
        before, _ = self._render_slots(base, tools, add_generation_prompt=False)
        after, _ = self._render_slots(base + list(observations), tools, add_generation_prompt=True)
        if not after.startswith(before):
            raise ConfigError(
                "the chat template renders earlier messages differently once observations follow; "
                "use a template whose rendering is append-only for observations (e.g. 'chatml_tools')"
            )
        slot = f"{_OPEN}1{_CLOSE}"  # the assistant content's placeholder in `before`
        if slot not in before:
            raise ConfigError("the chat template drops assistant content; cannot find where a turn ends")
        closing = before[before.index(slot) + len(slot) :]
        delta = closing + after[len(before) :]
        if strip and delta.startswith(strip):
            delta = delta[len(strip) :]
        parts: list[list[int] | int] = []
        pos = 0
        for m in _SLOT_RE.finditer(delta):
            if m.start() > pos:
                parts.append(self.tokenizer.encode(delta[pos : m.start()], add_special_tokens=False))
            parts.append(int(m.group(1)) - 2)  # slots 0 and 1 are the base messages
            pos = m.end()
        if pos < len(delta):
            parts.append(self.tokenizer.encode(delta[pos:], add_special_tokens=False))
        return parts

    def closes_turn(self, token_id: int) -> bool:
        """True when ``token_id`` is the first token of the text the template puts after an
        assistant message (EOS for ChatML): a turn that ended with it is closed."""
        hit = self._closes.get(token_id)
        if hit is None:
            base = [{"role": "user", "content": "\ue002"}, {"role": "assistant", "content": "\ue003"}]
            before, _ = self._render_slots(base, None, add_generation_prompt=False)
            slot = f"{_OPEN}1{_CLOSE}"
            closing = before[before.index(slot) + len(slot) :] if slot in before else ""
            text = self.tokenizer.decode([token_id])
            hit = bool(text) and closing.startswith(text)
            self._closes[token_id] = hit
        return hit

    def closing_ids(self, turn_ended_with_eos: bool = True) -> list[int]:
        """Ids the template puts after an assistant message (minus the sampled EOS)."""
        base = [{"role": "user", "content": "\ue002"}, {"role": "assistant", "content": "\ue003"}]
        before, _ = self._render_slots(base, None, add_generation_prompt=False)
        slot = f"{_OPEN}1{_CLOSE}"
        closing = before[before.index(slot) + len(slot) :]
        if turn_ended_with_eos and self._eos_text and closing.startswith(self._eos_text):
            closing = closing[len(self._eos_text) :]
        return self.tokenizer.encode(closing, add_special_tokens=False) if closing else []


def _freeze(value: Any) -> Any:
    """A hashable stand-in for JSON-like data (cache keys)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


_PLAIN_ENCODERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _plain_text_encoder(tokenizer: Any) -> Any:
    """A copy of a fast tokenizer's Rust backend that never emits special tokens for text
    (``encode_special_tokens=True``); None for slow tokenizers (the Python path is used).
    Built once per tokenizer (the copy takes a few hundred milliseconds)."""
    try:
        return _PLAIN_ENCODERS[tokenizer]
    except (KeyError, TypeError):
        pass
    plain = _build_plain_text_encoder(tokenizer)
    try:
        _PLAIN_ENCODERS[tokenizer] = plain
    except TypeError:  # not weak-referenceable
        pass
    return plain


def _build_plain_text_encoder(tokenizer: Any) -> Any:
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return None
    try:
        import tokenizers

        plain = tokenizers.Tokenizer.from_str(backend.to_str())
        plain.encode_special_tokens = True
        plain.no_truncation()
        plain.no_padding()
    except Exception:  # noqa: BLE001 - fall back to the tokenizer's own (slower) path
        return None
    return plain


# --------------------------------------------------------------------------- drift check
@dataclass(frozen=True)
class TokenizationReport:
    """Result of :func:`check_tokenization`."""

    equal: bool
    """True when the append-only ids equal a fresh rendering (a trailing closing text aside)."""
    incremental_ids: list[int]
    """What the runtime feeds and trains on: prompt once, sampled turns, observation deltas."""
    rerendered_ids: list[int]
    """The whole conversation rendered again and tokenized in one go."""
    first_mismatch: int | None
    """Index of the first differing id, or None."""

    def explain(self, tokenizer: Any, width: int = 8) -> str:
        """A short human-readable account of the first mismatch."""
        if self.first_mismatch is None:
            return "append-only ids equal the re-rendered conversation"
        i = self.first_mismatch
        a = tokenizer.decode(self.incremental_ids[i : i + width])
        b = tokenizer.decode(self.rerendered_ids[i : i + width])
        return f"ids differ at {i}: sampled/appended {a!r} vs re-rendered {b!r}"


def check_tokenization(
    renderer: ChatRenderer,
    conversation: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
) -> TokenizationReport:
    """Prove (or refute) that the trainer's ids equal the sampled ids for ``conversation``.

    ``conversation`` is an episode as messages: the first messages, then assistant turns and
    the observations that followed each. The incremental ids are built exactly as the agent
    loop builds them (each assistant turn as the policy would have sampled it: its text then
    EOS). The re-rendered ids are ``tokenizer.encode(template(conversation))``, what a trainer
    that re-tokenizes text would use. They must agree for every id the runtime produced; the
    template may add closing text after the last turn.
    """
    tok = renderer.tokenizer
    msgs = list(conversation)
    first_assistant = next((i for i, m in enumerate(msgs) if m["role"] == "assistant"), len(msgs))
    ids = renderer.encode_prompt(msgs[:first_assistant], tools)
    i = first_assistant
    while i < len(msgs):
        turn = msgs[i]
        ids += renderer.encode_text(turn.get("content") or "")
        if renderer.eos_token_id is not None:
            ids.append(renderer.eos_token_id)
        j = i + 1
        while j < len(msgs) and msgs[j]["role"] != "assistant":
            j += 1
        if j > i + 1:
            ids += renderer.encode_observation(msgs[i + 1 : j], tools, turn_ended_with_eos=True)
        i = j
    ends_with_turn = bool(msgs) and msgs[-1]["role"] == "assistant"
    text = renderer.render_text(msgs, tools, add_generation_prompt=not ends_with_turn)
    full = tok.encode(text, add_special_tokens=False)
    mismatch = next((k for k, (a, b) in enumerate(zip(ids, full, strict=False)) if a != b), None)
    if mismatch is None and len(ids) > len(full):
        mismatch = len(full)
    if mismatch is None and len(full) > len(ids):
        # only the template's closing text may follow the last sampled turn
        if not ends_with_turn or full[len(ids) :] != renderer.closing_ids(True):
            mismatch = len(ids)
    return TokenizationReport(mismatch is None, ids, full, mismatch)
