"""The CPU-sized search task: notes on invented people, found only by searching for them.

The bundled ``search`` questions (an invented archipelago, two-hop chains over 169 passages) are
out of reach of SmolLM2-135M-Instruct: it searched in 0.175 of 3 turns and answered 0 of 40
held-out questions, so GRPO had nothing to learn from. This task keeps the ``search`` env's
episode (``<search>`` turns answered with ``<information>`` passages from a BM25 index,
``<answer>`` ends the episode, exact-match reward, :data:`MAX_TURNS` turns) on questions a 135M
model sometimes answers:

- One note per invented person, ``name: Ben Hughes. town: Fairbury. job: potter.`` (the two
  facts in either order).
- A question asks for one person's town or job. The user turn names the person on a line of its
  own (``Person: Ben Hughes``), which the model copies into its search far more often than it
  picks the name out of the question.
- A search for a name returns three notes: the person's own first, then people who share a
  first or a last name with them, whose towns and jobs differ. The skill to learn is reading the
  right note.
- Three solved examples (people of neither split) come before the question as earlier chat
  turns, in the exact form the env produces.

The names, towns and jobs are invented or drawn from disjoint lists, so no answer can come from
the model's memory: the per-episode metric ``answer_supported`` (the final answer appears in a
note the agent was shown) says whether it was read from the environment.

Held out means held out:

- **People, towns and jobs.** Training questions ask about people in the training corpus,
  held-out questions about people in a separate held-out corpus (its own BM25 index: each row
  names its corpus in ``env_config``). No first name, last name, town or job of the held-out
  corpus appears in the training corpus, so a job or town guessed from training cannot score.
- **Wordings.** Each question kind has one wording for training and a different one for the
  held-out set.

Everything is generated from ``seed`` (no files are committed): :func:`write_task` writes the
two corpora and ``train.jsonl`` / ``eval.jsonl`` rows.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_TURNS",
    "KINDS",
    "SYSTEM_PROMPT",
    "EXAMPLES",
    "Person",
    "people",
    "task_rows",
    "write_task",
]

#: Turns per episode: a search and the answer, with room for a second search after a bad one.
MAX_TURNS = 4

# Training and held-out people, towns and jobs draw from disjoint lists.
_FIRST = {
    "train": "Alice Tom Emma Jack Lucy Sam Grace Ben Mia Leo Ruth Adam Nora Paul Kate Owen".split(),
    "eval": "Clara Hugo Ivy Felix Rosa Victor Jane Oscar".split(),
}
_LAST = {
    "train": "Carter Hughes Porter Bennett Russell Lawson Fisher Dawson Walsh Harper Mason Nolan".split(),
    "eval": "Sinclair Whitaker Holloway Prescott Lindqvist Abbott".split(),
}
_TOWN_SYLLABLES = {
    "train": ("Ash Brook Clay Dun Elm Fair Glen Hart Lang Mill", "ford ton field wick bury"),
    "eval": ("Kirk Stan Wex Thorn", "mouth ley holme"),
}
_JOBS = {
    "train": "glazier cooper tanner weaver potter miller chandler saddler thatcher farrier "
    "fletcher wheelwright cutler tailor baker butcher".split(),
    "eval": "bookbinder locksmith ropemaker clockmaker cobbler glassblower plasterer tinsmith "
    "engraver upholsterer".split(),
}

#: Question kinds: ``(kind, training wording, held-out wording)``; ``{p}`` is the person.
KINDS: tuple[tuple[str, str, str], ...] = (
    ("town", "In which town does {p} live?", "Name the town that {p} lives in."),
    ("job", "What is the job of {p}?", "What does {p} work as?"),
)

SYSTEM_PROMPT = """\
You answer questions about people you do not know. Search the notes for a person by writing \
<search>their name</search>; the matching notes come back in <information>. Then answer with \
<answer>...</answer>. You have {max_turns} turns."""


@dataclass(frozen=True)
class Person:
    """One invented person: one note of the corpus."""

    name: str
    town: str
    job: str
    order: int
    """Which of the two fact orders the note uses."""

    def note(self) -> str:
        """``name: N. town: T. job: J.`` (or job before town). The name in the text as well as
        the title ranks a person's own note above notes sharing one of their names."""
        facts = [f"town: {self.town}.", f"job: {self.job}."]
        return " ".join([f"name: {self.name}.", *(facts if self.order == 0 else facts[::-1])])


#: People of neither split, for the solved examples in the prompt.
_EXAMPLE_PEOPLE = {
    p.name: p
    for p in (
        Person("Pim Arrow", "Lodmere", "dyer", 0),
        Person("Pim Marsh", "Carrow", "smith", 1),
        Person("Ada Marsh", "Tewfield", "joiner", 1),
    )
}
#: ``(person, question, people whose notes the search returns, answer)`` of each solved example:
#: the notes BM25 returns over these three (a test checks), the person's own first.
_EXAMPLE_SCRIPT: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("Pim Arrow", "In which town does Pim Arrow live?", ("Pim Arrow", "Pim Marsh"), "Lodmere"),
    ("Pim Marsh", "What is the job of Pim Marsh?", ("Pim Marsh", "Pim Arrow", "Ada Marsh"), "smith"),
    ("Ada Marsh", "In which town does Ada Marsh live?", ("Ada Marsh", "Pim Marsh"), "Tewfield"),
)


def _information(names: tuple[str, ...]) -> str:
    """The ``search`` env's observation for the notes of these example people."""
    docs = [f"Doc {i}(Title: {n}) {_EXAMPLE_PEOPLE[n].note()}" for i, n in enumerate(names, 1)]
    return "\n<information>" + "\n".join(docs) + "</information>\n"


#: The solved examples, as earlier chat turns (a 135M model copies a format it has seen, and
#: ignores one it is told).
EXAMPLES: tuple[dict[str, str], ...] = tuple(
    turn
    for name, question, hits, answer in _EXAMPLE_SCRIPT
    for turn in (
        {"role": "user", "content": f"Person: {name}\nQuestion: {question}"},
        {"role": "assistant", "content": f"<search>{name}</search>"},
        {"role": "user", "content": _information(hits)},
        {"role": "assistant", "content": f"<answer>{answer}</answer>"},
    )
)


def people(split: str, seed: int = 0) -> list[Person]:
    """The people of ``split`` (``train``: 64, ``eval``: 32), with distinct names."""
    if split not in _FIRST:
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    rng = random.Random(f"{seed}-people-{split}")
    a, b = _TOWN_SYLLABLES[split]
    towns = [x + y for x in a.split() for y in b.split()]
    count = 64 if split == "train" else 32
    names = rng.sample([f"{f} {last}" for f in _FIRST[split] for last in _LAST[split]], count)
    return [Person(n, rng.choice(towns), rng.choice(_JOBS[split]), rng.randrange(2)) for n in names]


def task_rows(
    split: str, corpus_path: str | Path, *, seed: int = 0, max_turns: int = MAX_TURNS
) -> list[dict[str, Any]]:
    """The question rows of ``split`` in the runtime's format over the corpus at ``corpus_path``:
    each person asked each kind of :data:`KINDS`, in the split's wording."""
    wording = 1 if split == "train" else 2
    rows = []
    for p in people(split, seed):
        for kind, *texts in KINDS:
            question = texts[wording - 1].format(p=p.name)
            rows.append(
                {
                    "id": f"{split}-{p.name.replace(' ', '_').lower()}-{kind}",
                    "data_source": "skyrl-search-cpu",
                    "prompt": [
                        {"role": "system", "content": SYSTEM_PROMPT.format(max_turns=max_turns)},
                        *EXAMPLES,
                        {"role": "user", "content": f"Person: {p.name}\nQuestion: {question}"},
                    ],
                    "env_class": "search",
                    "env_config": {"corpus_path": str(corpus_path)},
                    "reward_spec": {"method": "rule", "ground_truth": {"target": [getattr(p, kind)]}},
                    "max_turns": max_turns,
                    "extra_info": {"kind": kind, "question": question, "split": split, "person": p.name},
                }
            )
    return rows


def write_corpus(path: Path, folks: list[Person]) -> None:
    """One ``{"id", "title", "text"}`` line a person (the ``search`` env's ``corpus_path`` format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for i, p in enumerate(folks):
            fh.write(json.dumps({"id": f"person-{i:03d}", "title": p.name, "text": p.note()}) + "\n")


def write_task(root: str | Path, *, seed: int = 0, max_turns: int = MAX_TURNS) -> tuple[Path, Path]:
    """Write ``root/{train,eval}_corpus.jsonl`` and ``root/{train,eval}.jsonl`` (training rows
    shuffled with ``seed``); returns the two row files."""
    root = Path(root).resolve()
    paths = []
    for split in ("train", "eval"):
        corpus = root / f"{split}_corpus.jsonl"
        write_corpus(corpus, people(split, seed))
        rows = task_rows(split, corpus, seed=seed, max_turns=max_turns)
        random.Random(seed).shuffle(rows)
        path = root / f"{split}.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
        paths.append(path)
    return paths[0], paths[1]


if __name__ == "__main__":
    import sys

    train_file, eval_file = write_task(sys.argv[1] if len(sys.argv) > 1 else "runs/search-cpu-data")
    for f in (train_file, eval_file):
        print(f, sum(1 for _ in open(f)))
