"""Bundled open questions with reference answers for ``judge_qa``, and rows in the runtime's format.

``data/questions.jsonl``: 20 questions written for this project (general knowledge; answers are
a sentence, not a single token), each with a ``reference`` answer and ``accept`` phrases that the
offline ``exact`` judge looks for; split 16 train / 4 test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from skyrl_gym.envs._records import split_records

__all__ = ["QUESTIONS_PATH", "INSTRUCTION", "load_bundled_rows", "make_row"]

QUESTIONS_PATH = Path(__file__).parent / "data" / "questions.jsonl"
INSTRUCTION = (
    "Answer the question in one or two sentences. Put your final answer between <answer> and </answer>."
)


def make_row(
    question: str,
    reference: str,
    *,
    accept: list[str] | None = None,
    row_id: str,
    data_source: str = "skyrl/judge-qa",
) -> dict[str, Any]:
    """A ``judge_qa`` row: the question goes in the prompt and in ``question``; the reference
    answer and accepted phrases in ``reward_spec.ground_truth``."""
    return {
        "id": row_id,
        "question": question,
        "prompt": [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}],
        "env_class": "judge_qa",
        "reward_spec": {
            "method": "llm_judge",
            "ground_truth": {"reference": reference, "accept": list(accept or [])},
        },
        "data_source": data_source,
    }


def load_bundled_rows(split: Literal["train", "test", "all"] = "train") -> list[dict[str, Any]]:
    """Rows of the bundled questions, in file order."""
    return [
        make_row(q["question"], q["reference"], accept=q["accept"], row_id=f"judge-{q['id']}")
        for q in split_records(QUESTIONS_PATH, split)
    ]
