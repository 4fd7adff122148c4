"""``search``: multi-turn retrieval QA in the Search-R1 format, with an exact-match reward.

Each turn the model either searches or answers::

    <search>inventor of the tidewheel</search>     -> user: "\\n<information>Doc 1(Title: ...) ...</information>\\n"
    <answer>Harrowby</answer>                      -> done; reward 1.0 if it matches, else 0.0

* The episode ends at the first turn with an ``<answer>...</answer>`` (the last one in that turn
  is graded) or after ``max_turns`` turns (default 3: two searches and an answer; the
  published env defaults to 2). A search on the last turn is not run: its result could not be
  used. Ending at the turn limit without an answer is ``truncated`` and scores 0.
* Reward: exact match after normalization (lowercase, punctuation and the articles a/an/the
  removed, whitespace collapsed) against ``extras["reward_spec"]["ground_truth"]["target"]``, a
  string or a list of acceptable answers. Turns before the last score 0.
* A turn with neither tag gets an observation explaining the format (a model's mistake).
* Retrieval: ``env_config["retriever"]`` is ``"bm25"`` (default: a local BM25 index over the
  bundled corpus, or over ``corpus_path``) or ``"remote"`` (a Search-R1-style server at
  ``search_url``). When the server still fails after its retries, ``step`` raises
  :class:`~skyrl_gym.envs.search.types.RetrievalError`: an infrastructure failure that the
  runtime records and masks, never a reward of 0.
* A published skyrl-gym config (``search_url``, ``topk``, ``timeout``, ``log_requests``, no
  ``retriever``) runs in published-compatible mode: the remote retriever at ``search_url``,
  one ``{"query": ..., "topk": ..., "return_scores": true}`` request per search with the
  given ``timeout`` (30 s by default), and the published observation
  ``"\\n<information>" + json.dumps({"result": "Doc 1: <contents>\\n..."}) + "</information>\\n"``
  (see :class:`~skyrl_gym.envs.search.types.SearchConfig`).
* The metadata of a turn that searched (or tried to) has the published keys ``tool_group``
  (``"SearchToolGroup"``), ``tool_name`` (``"search"``) and ``tool_input`` (``[query as
  written]``, or ``[None]`` without a ``<search>`` tag), plus ``query`` and ``hits``.

``env_config`` keys (all optional; an unknown key raises :class:`~skyrl_gym.errors.ConfigError`
with the closest known one): ``retriever``, ``topk`` (3), ``max_turns`` (3; a row's
``extras["max_turns"]`` wins), ``max_query_chars`` (500), ``max_passage_chars`` (800; no cut in
published mode), ``observation_format`` (``passages``; ``published`` in published mode);
for BM25: ``corpus_path``, ``bm25_k1`` (1.2), ``bm25_b`` (0.75); for the remote retriever:
``search_url``, ``timeout_s`` or ``timeout`` (10; 30 in published mode), ``max_retries`` (5),
``backoff_s`` (0.5), ``max_backoff_s`` (8), ``deadline_s`` (60, or the timeout when longer),
``request_format`` (``queries``; ``query`` in published mode), ``log_requests`` (false).
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from skyrl_gym.core import BaseTextEnv
from skyrl_gym.envs.search.bm25 import BM25Index, load_passages
from skyrl_gym.envs.search.data import bundled_passages, load_bundled_rows
from skyrl_gym.envs.search.remote import RemoteRetriever
from skyrl_gym.envs.search.types import (
    BM25Config,
    RemoteRetrieverConfig,
    Retriever,
    SearchConfig,
    SearchEnvConfig,
    SearchHit,
)
from skyrl_gym.errors import ConfigError
from skyrl_gym.types import BaseTextEnvStepOutput, EnvExample

__all__ = [
    "SearchEnv",
    "SearchEnvConfig",
    "normalize_answer",
    "exact_match",
    "format_hits",
    "format_published",
    "bm25_index",
]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_SEARCH_RE = re.compile(r"<search>(.*?)</search>", re.DOTALL)
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_INVALID = (
    "Your last turn had no <search>query</search> and no <answer>answer</answer>. "
    "Search with <search>query</search> or answer with <answer>answer</answer>."
)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace."""
    return " ".join(_ARTICLES_RE.sub(" ", text.lower().translate(_PUNCT)).split())


def exact_match(prediction: str, targets: str | list[str] | tuple[str, ...]) -> bool:
    """True when ``prediction`` equals one of ``targets`` after :func:`normalize_answer`."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(str(t)) for t in ([targets] if isinstance(targets, str) else targets))


def format_hits(hits: list[SearchHit], max_passage_chars: int | None = 800) -> str:
    """Search-R1's passage list: ``Doc 1(Title: T) text`` a line."""
    if not hits:
        return "No passage matched the query."
    return "\n".join(
        f"Doc {i}(Title: {h.passage.title}) {h.passage.text[:max_passage_chars]}"
        for i, h in enumerate(hits, 1)
    )


def format_published(hits: list[SearchHit], max_passage_chars: int | None = None) -> str:
    """The published skyrl-gym search result: the JSON object ``{"result": text}`` where
    ``text`` has one ``Doc i: <contents>`` line per hit (each ending in a newline; ``contents``
    stripped, as the server sent it, cut to ``max_passage_chars`` when given). No hit gives
    ``{"result": ""}``, as the published client shows a server's empty result list."""
    lines = []
    for i, hit in enumerate(hits, 1):
        contents = hit.passage.search_r1_contents().strip()
        lines.append(f"Doc {i}: {contents[:max_passage_chars]}\n")
    return json.dumps({"result": "".join(lines)})


@lru_cache(maxsize=8)
def bm25_index(corpus_path: str | None = None, k1: float = 1.2, b: float = 0.75) -> BM25Index:
    """A BM25 index over the bundled corpus (``corpus_path=None``) or a JSONL file, built once per
    process for each distinct argument tuple."""
    passages = bundled_passages() if corpus_path is None else load_passages(corpus_path)
    return BM25Index(passages, BM25Config(k1=k1, b=b))


def _targets(extras: Any) -> list[str]:
    try:
        truth = extras["reward_spec"]["ground_truth"]
    except (KeyError, TypeError):
        truth = None
    if isinstance(truth, dict) or hasattr(truth, "get"):
        truth = truth.get("target")
    if hasattr(truth, "tolist"):  # a numpy array, as parquet datasets load Search-R1's targets
        truth = truth.tolist()
    if isinstance(truth, str):
        return [truth]
    if isinstance(truth, Sequence) and len(truth) > 0 and all(isinstance(t, str) for t in truth):
        return list(truth)
    raise ConfigError(
        "search needs extras={'reward_spec': {'ground_truth': {'target': 'answer' or ['answer', ...]}}}; "
        "rows from skyrl_gym.envs.search.load_bundled_rows() have it"
    )


class SearchEnv(BaseTextEnv):
    """Search with <search>query</search>, answer with <answer>...</answer>; exact-match reward."""

    def __init__(self, env_config: Any = None, extras: Any = None) -> None:
        super().__init__(env_config, extras)
        self.targets = _targets(self.extras)
        self.config = cfg = SearchConfig.from_env_config(env_config)
        self.max_turns = int(self.extras.get("max_turns", cfg.max_turns))
        if self.max_turns < 1:
            raise ConfigError(f"search max_turns must be >= 1, got {self.max_turns}")
        self.topk = cfg.topk
        self.max_query_chars = cfg.max_query_chars
        self.max_passage_chars = cfg.max_passage_chars
        self.kind = cfg.retriever
        self._remote_config: RemoteRetrieverConfig | None = cfg.remote
        self._retriever: Retriever | None = None  # remote: built on first use, with the env's seeded rng
        if cfg.retriever == "bm25":
            self._retriever = bm25_index(cfg.corpus_path, cfg.bm25.k1, cfg.bm25.b)
        self.searches = 0
        self.retrieved: list[str] = []
        """The text of every search result shown so far (for ``answer_supported``)."""
        self.invalid_turns = 0
        self.answer: str | None = None
        self.correct = False

    @property
    def retriever(self) -> Retriever:
        """The retriever this episode uses."""
        if self._retriever is None:
            assert self._remote_config is not None
            self._retriever = RemoteRetriever(self._remote_config, rng=self.rng)
        return self._retriever

    @classmethod
    def bundled_rows(cls, split: str = "train", n: int = 0, seed: int = 0) -> list[dict[str, Any]]:
        """The bundled questions over the bundled corpus; train and test questions are disjoint."""
        if split not in ("train", "test"):
            raise ConfigError(f"unknown split {split!r}; use 'train' or 'test'")
        rows = [dict(r) for r in load_bundled_rows(split)]
        return rows[:n] if n else rows

    @classmethod
    def example(cls) -> EnvExample:
        row = next(r for r in load_bundled_rows("test") if r["hops"] == 2)
        return EnvExample(
            extras={"reward_spec": row["reward_spec"]},
            prompt=tuple(row["prompt"]),
            good_actions=(
                f"<search>{row['question']}</search>",
                f"<answer>{row['reward_spec']['ground_truth']['target'][0]}</answer>",
            ),
        )

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        answers = _ANSWER_RE.findall(action)
        if answers:
            self.answer = answers[-1].strip()
            self.correct = exact_match(self.answer, self.targets)
            return BaseTextEnvStepOutput(
                observations=[],
                reward=float(self.correct),
                done=True,
                metadata={"answer": self.answer[:200], "correct": self.correct},
                truncated=False,
            )
        done = self.turns >= self.max_turns
        match = _SEARCH_RE.search(action)
        query = match.group(1).strip()[: self.max_query_chars] if match else ""
        if done:  # a search now could not be used: skip it
            meta: dict[str, Any] = {"query": query[:200]} if query else {"error": "no_action"}
            return BaseTextEnvStepOutput(
                observations=[], reward=0.0, done=True, metadata=meta, truncated=True
            )
        # The published metadata: the search tool's arguments ([query as written] or [None]).
        tool = {
            "tool_group": "SearchToolGroup",
            "tool_name": "search",
            "tool_input": [match.group(1) if match else None],
        }
        if not query:
            self.invalid_turns += 1
            kind = "empty_query" if match else "no_action"
            content = "Your search query was empty. " + _INVALID if match else _INVALID
            return BaseTextEnvStepOutput(
                observations=[{"role": "user", "content": content}],
                reward=0.0,
                done=False,
                metadata={**tool, "error": kind},
                truncated=False,
            )
        hits = self.retriever.search([query], self.topk)[0]  # RetrievalError propagates: infra failure
        self.searches += 1
        if self.config.observation_format == "published":
            body = format_published(hits, self.max_passage_chars)
        else:
            body = format_hits(hits, self.max_passage_chars)
        self.retrieved.append(body)
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": f"\n<information>{body}</information>\n"}],
            reward=0.0,
            done=False,
            metadata={**tool, "query": query[:200], "hits": [h.passage.id for h in hits]},
            truncated=False,
        )

    def answer_supported(self) -> bool:
        """Whether the final answer appears (both normalised as the reward normalises) in a
        search result the agent was shown before answering: the answer came from reading the
        environment, not from the model's own memory."""
        if not self.answer or not normalize_answer(self.answer):
            return False
        needle = f" {normalize_answer(self.answer)} "
        return any(needle in f" {normalize_answer(text)} " for text in self.retrieved)

    def get_metrics(self) -> dict[str, Any]:
        metrics: dict[str, Any] = {
            "turns": self.turns,
            "searches": self.searches,
            "invalid_turns": self.invalid_turns,
            "answered": self.answer is not None,
            "correct": self.correct,
            "answer_supported": self.answer_supported(),
        }
        if isinstance(self._retriever, RemoteRetriever):
            metrics["retrieval_retries"] = self._retriever.retries
        return metrics
