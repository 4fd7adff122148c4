"""The CPU-sized SkyRL-SQL task: small generated databases, split by schema and by wording.

SmolLM2-135M-Instruct almost never answers the bundled questions (joins over four-table
schemas), and a task the model never solves gives GRPO nothing to learn from. This task keeps
the published recipe's episode (think, explore with ``<sql>``, answer with ``<solution>``,
observations from the database, the published reward) on questions a 135M model can sometimes
answer: one table per database, six question shapes (count, filtered count, lookup, largest,
smallest, filtered list).

Held out means held out:

- **Schemas.** Each domain (``pets``, ``ships``, ...) is one table layout. Training databases
  use :data:`TRAIN_DOMAINS`, held-out databases :data:`EVAL_DOMAINS`; no table or column name of
  a held-out schema appears in a training schema.
- **Wordings.** Every question shape has one wording for training and a different one for the
  held-out set, so no question template is shared either.

Everything is generated from ``seed`` (no files are committed): :func:`write_task` builds the
SQLite files under ``<root>/spider/database/<db_id>/<db_id>.sqlite`` (the env's ``spider``
layout, so ``text2sql`` finds them with ``db_path=<root>``) and writes ``train.jsonl`` and
``eval.jsonl`` rows in the published format.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Domain", "TRAIN_DOMAINS", "EVAL_DOMAINS", "SYSTEM_PROMPT", "write_task", "task_rows"]


@dataclass(frozen=True)
class Domain:
    """One table layout: ``table(key TEXT, kind TEXT, amount INTEGER)`` under its own names."""

    table: str
    """Table name, a plural noun (``pets``)."""
    key: str
    """The name column (unique per row)."""
    kind: str
    """A category column."""
    amount: str
    """An integer column."""
    names: tuple[str, ...]
    """Values of ``key``."""
    kinds: tuple[str, ...]
    """Values of ``kind``."""
    low: int
    """Smallest ``amount``."""
    high: int
    """Largest ``amount``."""


def _d(table: str, key: str, kind: str, amount: str, names: str, kinds: str, low: int, high: int) -> Domain:
    return Domain(table, key, kind, amount, tuple(names.split()), tuple(kinds.split()), low, high)


TRAIN_DOMAINS: tuple[Domain, ...] = (
    _d("pets", "name", "species", "age", "Rex Milo Luna Bella Coco Max Nala Toby Daisy Oscar Kiwi Pip",
       "dog cat rabbit parrot", 1, 15),
    _d("cars", "model", "maker", "price", "Astra Civic Corolla Golf Polo Clio Focus Yaris Swift Mazda3 Leon Fabia",
       "Opel Honda Toyota Volkswagen", 9000, 40000),
    _d("books", "title", "genre", "pages", "Dune Emma Ulysses Beloved Hamlet Rebecca Walden Candide Ivanhoe Kim Heidi Lolita",
       "novel drama poetry essay", 90, 900),
    _d("employees", "employee", "department", "salary", "Ada Ben Chloe Dev Elena Farid Grace Hugo Ines Jonas Kira Liam",
       "sales finance legal research", 30000, 120000),
    _d("movies", "film", "genre", "minutes", "Alien Heat Jaws Rocky Psycho Vertigo Brazil Fargo Gravity Up Coco Big",
       "comedy thriller western horror", 80, 190),
    _d("songs", "song", "artist", "seconds", "Yesterday Imagine Hello Faith Layla Creep Roxanne Angie Hurt Jolene Vogue Zombie",
       "Adele Prince Madonna Sting", 120, 420),
    _d("players", "player", "team", "goals", "Ramos Silva Costa Muller Kane Salah Neymar Pogba Modric Kroos Pique Alba",
       "Lions Eagles Wolves Sharks", 0, 40),
    _d("hotels", "hotel", "city", "rooms", "Ritz Savoy Plaza Astoria Regent Majestic Imperial Royal Palace Grand Park Crown",
       "Paris Rome Vienna Madrid", 20, 600),
    _d("plants", "plant", "family", "height", "Fern Ivy Mint Basil Sage Thyme Lily Rose Tulip Daisy Orchid Aloe",
       "Lamiaceae Rosaceae Liliaceae Asteraceae", 5, 200),
    _d("courses", "course", "faculty", "credits", "Algebra Botany Chemistry Drawing Economics French Geology History Latin Logic Music Physics",
       "science arts humanities engineering", 1, 12),
    _d("restaurants", "restaurant", "cuisine", "seats", "Luigi Sakura Olive Saffron Bistro Tandoor Pampas Nordic Taverna Wok Cantina Fonda",
       "Italian Japanese Indian Mexican", 10, 150),
    _d("bikes", "bike", "brand", "gears", "Rover Comet Falcon Arrow Breeze Storm Ranger Spirit Bolt Zephyr Tracer Nomad",
       "Giant Trek Cube Canyon", 1, 30),
)  # fmt: skip

EVAL_DOMAINS: tuple[Domain, ...] = (
    _d("ships", "vessel", "fleet", "crew", "Aurora Bounty Calypso Endeavour Fortuna Galatea Horizon Neptune Odyssey Polaris Triton Victoria",
       "north south east west", 5, 300),
    _d("rivers", "river", "continent", "length", "Nile Amazon Danube Rhine Volga Mekong Ganges Niger Loire Tagus Indus Yukon",
       "Africa Asia Europe America", 300, 6700),
    _d("computers", "computer", "vendor", "memory", "Apex Blade Core Delta Echo Flux Giga Helix Ion Jet Kilo Lumen",
       "Dell Lenovo Asus Acer", 4, 128),
    _d("museums", "museum", "district", "visitors", "Louvre Prado Uffizi Tate Rijks Orsay Hermitage Albertina Belvedere Guggenheim Getty Smithsonian",
       "centre harbour oldtown uptown", 1000, 90000),
)  # fmt: skip


# Question shapes: (shape, training wording, held-out wording, gold SQL). Placeholders: {t} table,
# {k} key column, {c} kind column, {a} amount column, {v} a kind value, {n} a key value.
SHAPES: tuple[tuple[str, str, str, str], ...] = (
    ("count", "How many rows does the {t} table have?", "Count the entries in {t}.",
     "SELECT COUNT(*) FROM {t}"),
    ("count_where", "How many {t} have {c} '{v}'?", "What is the number of {t} whose {c} is '{v}'?",
     "SELECT COUNT(*) FROM {t} WHERE {c} = '{v}'"),
    ("lookup", "What is the {a} of the {t} with {k} '{n}'?", "Give the {a} of '{n}' in {t}.",
     "SELECT {a} FROM {t} WHERE {k} = '{n}'"),
    ("max", "What is the largest {a} in {t}?", "Find the maximum {a} over all {t}.",
     "SELECT MAX({a}) FROM {t}"),
    ("min", "What is the smallest {a} in {t}?", "Find the minimum {a} over all {t}.",
     "SELECT MIN({a}) FROM {t}"),
    ("list_where", "List the {k} of every row of {t} with {c} '{v}'.", "Which {k} values in {t} have {c} '{v}'?",
     "SELECT {k} FROM {t} WHERE {c} = '{v}'"),
)  # fmt: skip

SYSTEM_PROMPT = """\
You answer a question about a SQLite database with one SQL query.

Each turn, first think inside <think>...</think>, then either
- run a query inside <sql>...</sql> to look at the data (its result comes back in <observation>), or
- give your final query inside <solution>...</solution>, which ends the task.

You have {max_turns} turns. The solution's rows are compared with the rows of the reference query."""

#: Two solved questions on a table of no training or held-out domain, shown before the question
#: as earlier chat turns (a 135M model copies a format it has seen, and ignores one it is told).
EXAMPLES: tuple[dict[str, str], ...] = (
    {"role": "user", "content": "Database schema:\nCREATE TABLE items (item TEXT PRIMARY KEY, colour TEXT, weight INTEGER);"
     "\n\nQuestion: How many items are there?"},
    {"role": "assistant", "content": "<think>I count the rows of items.</think>\n<solution>SELECT COUNT(*) FROM items</solution>"},
    {"role": "user", "content": "Database schema:\nCREATE TABLE items (item TEXT PRIMARY KEY, colour TEXT, weight INTEGER);"
     "\n\nQuestion: What is the weight of the item 'lamp'?"},
    {"role": "assistant", "content": "<think>I look at the row of lamp first.</think>\n"
     "<sql>SELECT * FROM items WHERE item = 'lamp'</sql>\n\n<observation>item | colour | weight\nlamp | red | 4"
     "</observation>\n\n<think>The row exists; I select its weight.</think>\n"
     "<solution>SELECT weight FROM items WHERE item = 'lamp'</solution>"},
)  # fmt: skip

USER_TEMPLATE = "Database schema:\n{schema}\n\nQuestion: {question}"


def _build_db(path: Path, dom: Domain, rng: random.Random, rows: int) -> list[tuple[str, str, int]]:
    names = rng.sample(dom.names, rows)
    data = [(n, rng.choice(dom.kinds), rng.randint(dom.low, dom.high)) for n in names]
    _write_db(path, dom, data)
    return data


def _write_db(path: Path, dom: Domain, data: Sequence[tuple[str, str, int]]) -> None:
    """Write ``dom``'s one table with ``data`` to the SQLite file ``path`` (replaced whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    try:
        conn.execute(
            f"CREATE TABLE {dom.table} ({dom.key} TEXT PRIMARY KEY, {dom.kind} TEXT, {dom.amount} INTEGER)"
        )
        conn.executemany(f"INSERT INTO {dom.table} VALUES (?, ?, ?)", data)
        conn.commit()
    finally:
        conn.close()
    tmp.replace(path)


def _schema(dom: Domain) -> str:
    return f"CREATE TABLE {dom.table} ({dom.key} TEXT PRIMARY KEY, {dom.kind} TEXT, {dom.amount} INTEGER);"


def _questions(
    dom: Domain,
    data: Sequence[tuple[str, str, int]],
    rng: random.Random,
    wording: int,
    per_shape: int,
    shapes: Sequence[tuple[str, str, str, str]] = SHAPES,
    words: dict[str, str] | None = None,
) -> list[tuple[str, str, str]]:
    """``(shape, question, gold SQL)`` for one database; ``wording`` 1 is training's, 2 held-out's.

    ``words`` fills more placeholders (of the questions: the gold SQL uses the schema's names)."""
    out = []
    present_kinds = sorted({k for _, k, _ in data})
    for shape, *texts, sql in shapes:
        seen: set[str] = set()
        for _ in range(per_shape if "{v}" in sql or "{n}" in sql else 1):
            fill = {
                "t": dom.table, "k": dom.key, "c": dom.kind, "a": dom.amount,
                "v": rng.choice(present_kinds), "n": rng.choice(data)[0], **(words or {}),
            }  # fmt: skip
            q = texts[wording - 1].format(**fill)
            if q not in seen:
                seen.add(q)
                out.append((shape, q, sql.format(**fill)))
    return out


def task_rows(
    root: Path, split: str, *, max_turns: int = 3, seed: int = 0, dbs_per_domain: int = 0
) -> list[dict[str, Any]]:
    """Build the databases of ``split`` (``train``: 3 per training domain; ``eval``: 2 per
    held-out domain) under ``root`` and return their question rows in the published format."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    domains = TRAIN_DOMAINS if split == "train" else EVAL_DOMAINS
    per = dbs_per_domain or (3 if split == "train" else 2)
    rng = random.Random(f"{seed}-{split}")
    rows = []
    for dom in domains:
        for i in range(per):
            db_id = f"{dom.table}_{i}"
            db_file = root / "spider" / "database" / db_id / f"{db_id}.sqlite"
            data = _build_db(db_file, dom, rng, rows=rng.randint(6, 10))
            qs = _questions(dom, data, rng, 1 if split == "train" else 2, per_shape=2)
            for j, (shape, question, sql) in enumerate(qs):
                user = USER_TEMPLATE.format(schema=_schema(dom), question=question)
                rows.append(
                    {
                        "id": f"{split}-{db_id}-{j:02d}",
                        "data_source": "skyrl-sql-cpu",
                        "prompt": [
                            {"role": "system", "content": SYSTEM_PROMPT.format(max_turns=max_turns)},
                            *EXAMPLES,
                            {"role": "user", "content": user},
                        ],
                        "env_class": "text2sql",
                        "data": "spider",
                        "db_id": db_id,
                        "reward_spec": {"method": "rule", "ground_truth": sql},
                        "max_turns": max_turns,
                        "extra_info": {
                            "shape": shape,
                            "question": question,
                            "split": split,
                            "domain": dom.table,
                        },
                    }
                )
    return rows


def write_task(
    root: str | Path, *, max_turns: int = 3, seed: int = 0, make_rows: Callable[..., list[dict]] | None = None
) -> tuple[Path, Path]:
    """Build every database under ``root`` and write ``root/train.jsonl`` and ``root/eval.jsonl``
    (the training rows shuffled with ``seed``); returns the two paths. ``make_rows`` (default
    :func:`task_rows`) builds one split's databases and rows (``hidden_data.py`` passes its own)."""
    root = Path(root)
    make_rows = make_rows or task_rows
    paths = []
    for split in ("train", "eval"):
        rows = make_rows(root, split, max_turns=max_turns, seed=seed)
        random.Random(seed).shuffle(rows)
        path = root / f"{split}.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
        paths.append(path)
    return paths[0], paths[1]


if __name__ == "__main__":
    import sys

    train_file, eval_file = write_task(sys.argv[1] if len(sys.argv) > 1 else "runs/sql-cpu-data")
    for p in (train_file, eval_file):
        print(p, sum(1 for _ in open(p)))
