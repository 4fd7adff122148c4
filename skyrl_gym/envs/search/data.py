"""The bundled search corpus and questions, and rows in the runtime's format.

``data/corpus.jsonl``: 169 short passages written for this project (an invented island chain,
the Veloria Archipelago, plus general-knowledge facts), one ``{"id", "title", "text"}`` a line.
``data/questions.jsonl``: 52 questions whose answers appear in the corpus, 15 of them two-hop
(the answer needs two passages: "In which town was the inventor of the tidewheel born?"), split
42 train / 10 test. Questions about the invented islands cannot be answered from memory, so a
model has to search.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from skyrl_gym.envs._records import split_records
from skyrl_gym.envs.search.bm25 import load_passages
from skyrl_gym.envs.search.types import Passage

__all__ = [
    "CORPUS_PATH",
    "QUESTIONS_PATH",
    "INSTRUCTION",
    "bundled_passages",
    "load_bundled_rows",
    "make_row",
]

_DATA = Path(__file__).parent / "data"
CORPUS_PATH = _DATA / "corpus.jsonl"
QUESTIONS_PATH = _DATA / "questions.jsonl"

INSTRUCTION = (
    "Answer the question below. Think step by step. When you need a fact you do not know, search "
    "for it by writing <search>your query</search>; the results come back between <information> "
    "and </information>. You may search several times. When you know the answer, write only the "
    "answer between <answer> and </answer>, for example <answer>Paris</answer>."
)


@lru_cache(maxsize=1)
def bundled_passages() -> tuple[Passage, ...]:
    """The bundled corpus (read once per process)."""
    return tuple(load_passages(CORPUS_PATH))


def make_row(
    question: str, targets: list[str] | str, *, row_id: str, data_source: str = "skyrl/search"
) -> dict[str, Any]:
    """A row in the runtime's format for a question and its acceptable answers."""
    target = [targets] if isinstance(targets, str) else list(targets)
    return {
        "id": row_id,
        "question": question,
        "prompt": [{"role": "user", "content": f"{INSTRUCTION}\n\nQuestion: {question}"}],
        "env_class": "search",
        "reward_spec": {"method": "rule", "ground_truth": {"target": target}},
        "data_source": data_source,
    }


def load_bundled_rows(split: Literal["train", "test", "all"] = "train") -> list[dict[str, Any]]:
    """Rows of the bundled questions (``prompt``, ``env_class``, ``reward_spec``, ``data_source``,
    ``id``, plus ``question`` and ``hops``), in file order."""
    rows = []
    for q in split_records(QUESTIONS_PATH, split):
        row = make_row(
            q["question"], q["targets"], row_id=f"search-{q['id']}", data_source="skyrl/search-veloria"
        )
        row["hops"] = q["hops"]
        rows.append(row)
    return rows
