"""The CPU-sized SkyRL-SQL task with a hidden schema: the model must find the tables and columns.

The databases and questions of :mod:`cpu_data` (one table per database, the same domains and
values), with two changes that make exploring the database necessary:

- **The prompt names the database, not its schema.** Rows set ``env_config = {"hide_schema":
  True}`` and their prompt is already written hidden: the database's name and the env's sentence
  (:func:`skyrl_gym.envs.sql.hidden_schema_block`) where :mod:`cpu_data` shows the ``CREATE``
  statement. We write the rows hidden, rather than letting the env rewrite shown ones, so that
  the JSONL reads as what the model sees; the env would write the same prompt from a
  :mod:`cpu_data` row with ``hide_schema`` on.
- **Names are not guessable from the question.** The questions use the domain's words (``pets``,
  ``age``, ``price``), the table and its columns are synonyms or abbreviations
  (``critter_log.yrs_lived``, ``vehicle_lot.cost_amt``): a query written from the question's
  words fails with ``no such table``/``no such column``, one written after ``SELECT name FROM
  sqlite_master`` and ``PRAGMA table_info(<table>)`` runs.

Only the easier question shapes are kept (count, filtered count, lookup, largest, smallest), so
that SmolLM2-135M-Instruct can sometimes succeed; each has one wording for training and another
for the held-out set. The prompt shows one worked episode as earlier chat turns (:func:`worked_example`):
``sqlite_master`` -> ``PRAGMA table_info`` -> the query -> the solution, on a ``demo_shop``
database of neither split, with observations exactly as the env writes them
(:func:`skyrl_gym.envs.sql.format_observation`; the tests play its actions in the env and
compare). It takes four turns, so rows have ``max_turns`` 5 by default.

The split. Training databases use the :data:`TRAIN` domains (question words and values of
``cpu_data.TRAIN_DOMAINS``), held-out ones the :data:`EVAL` domains (``cpu_data.EVAL_DOMAINS``).
No table or column name of a held-out database, nor any of the ``_``-separated stems those
names are made of (``ram``, ``gb``, ``hull``...), occurs in a training database, and the
held-out questions use other wordings; the worked example's names are in neither split.

Everything is generated from ``seed``: :func:`write_task` builds the SQLite files under
``<root>/spider/database/<db_id>/<db_id>.sqlite`` (``text2sql`` finds them with
``db_path=<root>``) and writes ``train.jsonl`` and ``eval.jsonl``::

    python examples/skyrl_sql/hidden_data.py data/sql-hidden
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cpu_data  # noqa: E402
from cpu_data import EVAL_DOMAINS, SYSTEM_PROMPT, TRAIN_DOMAINS, Domain  # noqa: E402

from skyrl_gym.envs.sql import format_observation, hidden_schema_block  # noqa: E402

__all__ = [
    "HiddenDomain",
    "TRAIN",
    "EVAL",
    "SHAPES",
    "worked_example",
    "write_example_db",
    "task_rows",
    "write_task",
]


@dataclass(frozen=True)
class HiddenDomain:
    """A :mod:`cpu_data` domain whose table and columns are renamed: the questions use the
    domain's own words, the database the new names."""

    words: Domain
    """The domain as :mod:`cpu_data` has it: its names are the question's words, its values the
    data."""
    table: str
    """The table's name (not the domain's noun)."""
    key: str
    """The name column."""
    kind: str
    """The category column."""
    amount: str
    """The integer column."""

    @property
    def schema(self) -> Domain:
        """The domain under the database's names (what :func:`cpu_data._build_db` writes)."""
        return replace(self.words, table=self.table, key=self.key, kind=self.kind, amount=self.amount)


def _h(domains: tuple[Domain, ...], noun: str, table: str, key: str, kind: str, amount: str) -> HiddenDomain:
    return HiddenDomain(next(d for d in domains if d.table == noun), table, key, kind, amount)


TRAIN: tuple[HiddenDomain, ...] = tuple(
    _h(TRAIN_DOMAINS, *names)
    for names in (
        ("pets", "critter_log", "moniker", "breed_cls", "yrs_lived"),
        ("cars", "vehicle_lot", "trim_code", "mfr", "cost_amt"),
        ("books", "volume_shelf", "heading", "lit_cat", "leaf_cnt"),
        ("employees", "staff_roster", "staffer", "division", "pay_yr"),
        ("movies", "picture_reel", "feature", "style_tag", "run_len"),
        ("songs", "track_list", "track", "performer", "play_len"),
        ("players", "squad_member", "athlete", "club", "net_hits"),
        ("hotels", "lodging", "inn_nm", "town", "suites"),
        ("plants", "flora_cat", "specimen", "lineage", "stem_cm"),
        ("courses", "syllabus", "subject", "school", "units"),
        ("restaurants", "eatery", "venue", "kitchen_style", "covers"),
        ("bikes", "cycle_depot", "frame_nm", "maker_co", "speeds"),
    )
)
EVAL: tuple[HiddenDomain, ...] = tuple(
    _h(EVAL_DOMAINS, *names)
    for names in (
        ("ships", "maritime_roll", "hull", "flotilla", "sailors"),
        ("rivers", "waterway", "stream", "landmass", "span_km"),
        ("computers", "workstation", "host", "supplier", "ram_gb"),
        ("museums", "gallery_site", "institution", "quarter", "annual_guests"),
    )
)

# (shape, training wording, held-out wording, gold SQL). Questions use the domain's words: {T} its
# noun, {K} {C} {A} its columns' words; the SQL the schema's names {t} {k} {c} {a}; {v} a kind
# value, {n} a key value.
SHAPES: tuple[tuple[str, str, str, str], ...] = (
    ("count", "How many {T} are there?", "What is the total number of {T}?",
     "SELECT COUNT(*) FROM {t}"),
    ("count_where", "How many {T} have {C} '{v}'?", "Count the {T} whose {C} is '{v}'.",
     "SELECT COUNT(*) FROM {t} WHERE {c} = '{v}'"),
    ("lookup", "What is the {A} of the {T} with {K} '{n}'?", "Give the {A} of '{n}' among the {T}.",
     "SELECT {a} FROM {t} WHERE {k} = '{n}'"),
    ("max", "What is the largest {A} of the {T}?", "Find the highest {A} over all {T}.",
     "SELECT MAX({a}) FROM {t}"),
    ("min", "What is the smallest {A} of the {T}?", "Find the lowest {A} over all {T}.",
     "SELECT MIN({a}) FROM {t}"),
)  # fmt: skip

USER_TEMPLATE = "{schema_block}\n\nQuestion: {question}"

#: The worked example's database: in neither split (its names occur in no split's schema).
EXAMPLE_DB_ID = "demo_shop"
EXAMPLE_DOMAIN = Domain(
    "stock_rec", "sku_txt", "hue", "mass_g", ("lamp", "chair", "kettle"), ("red", "blue"), 1, 9
)
EXAMPLE_ROWS: tuple[tuple[str, str, int], ...] = (
    ("lamp", "red", 4),
    ("chair", "blue", 9),
    ("kettle", "red", 2),
)
EXAMPLE_QUESTION = "What is the weight of the item 'lamp'?"
#: The example's turns: (the model's action, the result text of its query; None for the solution).
EXAMPLE_TURNS: tuple[tuple[str, str | None], ...] = (
    ("<think>The schema is hidden. I list the tables first.</think>\n"
     "<sql>SELECT name FROM sqlite_master WHERE type = 'table'</sql>",
     "name\nstock_rec"),
    ("<think>The items are in stock_rec. I list its columns.</think>\n<sql>PRAGMA table_info(stock_rec)</sql>",
     "cid | name | type | notnull | dflt_value | pk\n0 | sku_txt | TEXT | 0 | NULL | 1\n"
     "1 | hue | TEXT | 0 | NULL | 0\n2 | mass_g | INTEGER | 0 | NULL | 0"),
    ("<think>The item is sku_txt and the weight is mass_g. I check the row of lamp.</think>\n"
     "<sql>SELECT sku_txt, mass_g FROM stock_rec WHERE sku_txt = 'lamp'</sql>",
     "sku_txt | mass_g\nlamp | 4"),
    ("<think>The row exists; I select its weight.</think>\n"
     "<solution>SELECT mass_g FROM stock_rec WHERE sku_txt = 'lamp'</solution>",
     None),
)  # fmt: skip


#: A shorter worked episode: one query reads the table's ``CREATE`` statement (its table and
#: columns at once), then the solution. Two turns, so rows have ``max_turns`` 3 with it.
EXAMPLE_TURNS_CREATE: tuple[tuple[str, str | None], ...] = (
    ("<think>The schema is hidden. I read the table's definition first.</think>\n"
     "<sql>SELECT sql FROM sqlite_master WHERE type = 'table'</sql>",
     "sql\nCREATE TABLE stock_rec (sku_txt TEXT PRIMARY KEY, hue TEXT, mass_g INTEGER)"),
    ("<think>The item is sku_txt and the weight is mass_g.</think>\n"
     "<solution>SELECT mass_g FROM stock_rec WHERE sku_txt = 'lamp'</solution>",
     None),
)  # fmt: skip

#: The worked episodes by name (``--example``): ``pragma`` lists the tables, then a table's
#: columns, then checks the row (four turns); ``create`` reads the ``CREATE`` statement (two).
EXAMPLES: dict[str, tuple[tuple[str, str | None], ...]] = {
    "pragma": EXAMPLE_TURNS,
    "create": EXAMPLE_TURNS_CREATE,
}
ExampleName = Literal["pragma", "create"]

#: More ``create`` episodes, on databases of neither split (``--examples 2`` or ``3`` shows them
#: after ``demo_shop``'s): (database, its one table's domain, question, the thought before the
#: solution, the solution). Only their prompts are shown; their databases are never opened.
MORE_CREATE_EXAMPLES: tuple[tuple[str, Domain, str, str, str], ...] = (
    ("demo_zoo", Domain("beast_tbl", "label", "zone", "kg_wt", ("ox",), ("north",), 1, 9),
     "How many animals are there?", "The animals are rows of beast_tbl.",
     "SELECT COUNT(*) FROM beast_tbl"),
    ("demo_fleet", Domain("craft_reg", "call_sign", "base", "seat_qty", ("kite",), ("west",), 1, 9),
     "What is the largest capacity of the planes?", "The capacity is seat_qty.",
     "SELECT MAX(seat_qty) FROM craft_reg"),
)  # fmt: skip


def _user(db_id: str, question: str) -> dict[str, str]:
    return {
        "role": "user",
        "content": USER_TEMPLATE.format(schema_block=hidden_schema_block(db_id), question=question),
    }


def worked_example(
    max_turns: int = 5,
    observation_style: Literal["inline", "messages"] = "inline",
    example: ExampleName = "pragma",
    examples: int = 1,
) -> list[dict[str, str]]:
    """The worked episode ``example`` (:data:`EXAMPLES`) as chat messages: the question on
    ``demo_shop``, then the model's turns with the env's observations (for an episode of
    ``max_turns``) appended to the model's message (``inline``, as ``cpu.flags`` plays episodes)
    or as user messages (``messages``). ``examples`` 2 or 3 (``create`` only) adds the episodes
    of :data:`MORE_CREATE_EXAMPLES` after it."""
    if example not in EXAMPLES:
        raise ValueError(f"unknown example {example!r}; use one of {sorted(EXAMPLES)}")
    turns = EXAMPLES[example]
    if max_turns < len(turns):
        raise ValueError(f"the worked example {example!r} takes {len(turns)} turns; max_turns is {max_turns}")
    if observation_style not in ("inline", "messages"):
        raise ValueError(f"unknown observation_style {observation_style!r}; use 'inline' or 'messages'")
    most = 1 + len(MORE_CREATE_EXAMPLES) if example == "create" else 1
    if not 1 <= examples <= most:
        raise ValueError(f"the worked example {example!r} has 1 to {most} episodes; examples is {examples}")
    episodes = [(EXAMPLE_DB_ID, EXAMPLE_QUESTION, turns)]
    for db_id, dom, question, thought, solution in MORE_CREATE_EXAMPLES[: examples - 1]:
        create = cpu_data._schema(dom).removesuffix(";")  # as sqlite_master stores it
        episodes.append(
            (
                db_id,
                question,
                (
                    (turns[0][0], f"sql\n{create}"),
                    (f"<think>{thought}</think>\n<solution>{solution}</solution>", None),
                ),
            )
        )
    messages: list[dict[str, str]] = []
    for db_id, question, episode in episodes:
        messages.append(_user(db_id, question))
        inline = ""
        for turn, (action, result) in enumerate(episode, start=1):
            observation = format_observation(result, max_turns - turn) if result is not None else ""
            if observation_style == "inline":
                inline += action + observation
            else:
                messages.append({"role": "assistant", "content": action})
                if observation:
                    messages.append({"role": "user", "content": observation})
        if inline:
            messages.append({"role": "assistant", "content": inline})
    return messages


def write_example_db(root: str | Path) -> Path:
    """Write the worked example's database under ``root`` (the ``spider`` layout) and return it
    (and, for the tests, :data:`MORE_CREATE_EXAMPLES`' databases beside it, three rows each)."""
    path = Path(root) / "spider" / "database" / EXAMPLE_DB_ID / f"{EXAMPLE_DB_ID}.sqlite"
    cpu_data._write_db(path, EXAMPLE_DOMAIN, EXAMPLE_ROWS)
    for db_id, dom, *_ in MORE_CREATE_EXAMPLES:
        data = [(f"{dom.names[0]}{i}", dom.kinds[0], i + 1) for i in range(3)]
        cpu_data._write_db(Path(root) / "spider" / "database" / db_id / f"{db_id}.sqlite", dom, data)
    return path


def task_rows(
    root: Path,
    split: str,
    *,
    max_turns: int = 5,
    seed: int = 0,
    dbs_per_domain: int = 0,
    observation_style: Literal["inline", "messages"] = "inline",
    example: ExampleName = "pragma",
    examples: int = 1,
    shapes: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Build the databases of ``split`` (``train``: 3 per :data:`TRAIN` domain; ``eval``: 2 per
    :data:`EVAL` domain) under ``root`` and return their hidden-schema rows: questions of every
    shape of :data:`SHAPES`, or of the named ``shapes`` only (both splits alike)."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    chosen = _shapes(shapes)
    domains = TRAIN if split == "train" else EVAL
    per = dbs_per_domain or (3 if split == "train" else 2)
    rng = random.Random(f"hidden-{seed}-{split}")
    shown = worked_example(max_turns, observation_style, example, examples)
    rows = []
    for hidden in domains:
        words = {
            "T": hidden.words.table,
            "K": hidden.words.key,
            "C": hidden.words.kind,
            "A": hidden.words.amount,
        }
        for i in range(per):
            db_id = f"{hidden.words.table}_h{i}"
            db_file = Path(root) / "spider" / "database" / db_id / f"{db_id}.sqlite"
            data = cpu_data._build_db(db_file, hidden.schema, rng, rows=rng.randint(6, 10))
            wording = 1 if split == "train" else 2
            qs = cpu_data._questions(
                hidden.schema, data, rng, wording, per_shape=2, shapes=chosen, words=words
            )
            for j, (shape, question, sql) in enumerate(qs):
                rows.append(
                    {
                        "id": f"hidden-{split}-{db_id}-{j:02d}",
                        "data_source": "skyrl-sql-cpu-hidden",
                        "prompt": [
                            {"role": "system", "content": SYSTEM_PROMPT.format(max_turns=max_turns)},
                            *shown,
                            _user(db_id, question),
                        ],
                        "env_class": "text2sql",
                        "env_config": {"hide_schema": True},
                        "data": "spider",
                        "db_id": db_id,
                        "reward_spec": {"method": "rule", "ground_truth": sql},
                        "max_turns": max_turns,
                        "extra_info": {
                            "shape": shape,
                            "question": question,
                            "split": split,
                            "domain": hidden.words.table,
                        },
                    }
                )
    return rows


def _shapes(names: Sequence[str] | None) -> tuple[tuple[str, str, str, str], ...]:
    """The :data:`SHAPES` named (all of them for None); ``ValueError`` naming an unknown one."""
    if names is None:
        return SHAPES
    known = [shape[0] for shape in SHAPES]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"unknown question shapes {unknown}; use some of {known}")
    return tuple(shape for shape in SHAPES if shape[0] in names)


def write_task(
    root: str | Path,
    *,
    max_turns: int = 5,
    seed: int = 0,
    observation_style: Literal["inline", "messages"] = "inline",
    example: ExampleName = "pragma",
    examples: int = 1,
    shapes: Sequence[str] | None = None,
    eval_databases: int = 2,
) -> tuple[Path, Path]:
    """Build every database under ``root`` and write ``root/train.jsonl`` and ``root/eval.jsonl``
    (the training rows shuffled with ``seed``; the worked episode ``example`` (``examples`` of
    them for ``create``), its observations as ``observation_style``, which the run's
    ``--observation-style`` must match; questions of the named ``shapes``, or of all;
    ``eval_databases`` held-out databases per held-out domain); returns the two paths."""
    _shapes(shapes)  # a bad name fails before any database is written
    if eval_databases < 1:
        raise ValueError(f"eval_databases must be at least 1, got {eval_databases}")
    rows = functools.partial(
        task_rows, observation_style=observation_style, example=example, examples=examples, shapes=shapes
    )

    def make_rows(root: Path, split: str, **kw: Any) -> list[dict[str, Any]]:
        return rows(root, split, dbs_per_domain=eval_databases if split == "eval" else 0, **kw)

    return cpu_data.write_task(root, max_turns=max_turns, seed=seed, make_rows=make_rows)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Write the hidden-schema text2sql task (databases and rows).")
    ap.add_argument("root", nargs="?", default="runs/sql-hidden-data", help="where to write it")
    ap.add_argument(
        "--observation-style",
        choices=("inline", "messages"),
        default="inline",
        help="the worked episode's observations inside the assistant turn (as cpu.flags plays) or as user turns",
    )
    ap.add_argument(
        "--example",
        choices=sorted(EXAMPLES),
        default="pragma",
        help="the worked episode: pragma (tables, then columns, then the row: 4 turns) or create "
        "(the CREATE statement, then the solution: 2 turns)",
    )
    ap.add_argument("--examples", type=int, default=1, help="worked episodes in the prompt (create: 1 to 3)")
    ap.add_argument("--max-turns", type=int, default=5, help="the rows' max_turns (the run's --max-turns)")
    ap.add_argument(
        "--shapes",
        nargs="+",
        choices=[shape[0] for shape in SHAPES],
        default=None,
        help="only these question shapes, in both splits (default: all)",
    )
    args = ap.parse_args()
    train_file, eval_file = write_task(
        args.root,
        max_turns=args.max_turns,
        observation_style=args.observation_style,
        example=args.example,
        examples=args.examples,
        shapes=args.shapes,
    )
    for p in (train_file, eval_file):
        print(p, sum(1 for _ in open(p)))
