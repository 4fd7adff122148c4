"""The SkyRL-SQL recipe's parts: flags files, the published data, benchmark splits, evaluation.

Used by ``train.py``, ``evaluate.py`` and ``cpu_run.py`` next to it (see README.md).

- :func:`read_flags` / :func:`train_config`: a flags file (one ``--flag value`` per line, ``#``
  comments) as the argument list of ``skyrl train`` and as the :class:`TrainConfig` it makes.
- :func:`load_published_rows`: the published 653-row training set, checked against the
  SynSQL/Spider databases under ``db_path`` (a clear error naming what is missing).
- :func:`load_split`: one benchmark split, from rows in the published format or from a
  Spider-style question file (``db_id``, ``question``, ``query``) with its database directory.
- :func:`evaluate_splits` / :func:`results_table`: execution accuracy per split, as the
  published table (one row per model, one column per split, and the average).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyrl_gym.envs.sql import LAYOUTS, make_row, resolve_db_file
from skyrl_gym.errors import ConfigError

HERE = Path(__file__).resolve().parent
#: The published training set on the Hugging Face Hub (540 SynSQL-2.5M + 113 Spider questions).
PUBLISHED_DATASET = "NovaSky-AI/SkyRL-SQL-653-data-newfmt"
#: The column order of the published results table (Spider benchmarks, 5 evaluation turns).
PUBLISHED_SPLITS = ("Dev", "Test", "Realistic", "DK", "Syn")
#: Stop strings of the recipe: a turn ends after a query or after the answer.
STOP = ("</sql>", "</solution>")


# ----------------------------------------------------------------------------- configs
def read_flags(path: str | os.PathLike[str]) -> list[str]:
    """The arguments in a flags file (:func:`trainers.config.read_flags`)."""
    from trainers.config import read_flags as read

    return read(path)


def train_config(flags: Sequence[str]) -> Any:
    """The :class:`~trainers.config.TrainConfig` that ``skyrl train FLAGS`` would run."""
    from trainers.config import config_from_flags

    return config_from_flags(flags)


def prepare_run(cfg: Any, dataset: str | None = None, db_path: str | None = None) -> Any:
    """The config to train on: the rows (the published set under ``db_path``, else the bundled
    training questions) written to ``<run_dir>/train_rows.jsonl`` with the episode's
    ``max_turns`` (so the env ends an episode, and gives its final reward, when the trainer's
    turn budget does), and with ``db_path`` an env id whose databases are found there."""

    import skyrl_gym

    if dataset is not None:
        if db_path is None:
            raise ConfigError("--dataset needs --db-path: the directory holding SynSQL-2.5M/ and spider/")
        rows = load_published_rows(dataset, db_path)
    else:
        from skyrl_gym.envs.sql import load_bundled_rows

        rows = [
            dict(r, id=r["extra_info"]["id"])
            for r in load_bundled_rows("train", max_turns=cfg.rollout.max_turns)
        ]
    rows = rows[: cfg.data.train_prompts or None]
    run_dir = Path(cfg.run.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    data = run_dir / "train_rows.jsonl"
    with open(data, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps({**row, "max_turns": cfg.rollout.max_turns}, default=str) + "\n")
    env = cfg.data.env
    if db_path is not None:
        from skyrl_gym.envs.sql import Text2SQLEnv

        env = "text2sql_published"

        def make_env(env_config: Any = None, extras: Any = None) -> Text2SQLEnv:
            return Text2SQLEnv({**dict(env_config or {}), "db_path": str(db_path)}, extras)

        if env in {s.id for s in skyrl_gym.list_envs()}:
            skyrl_gym.deregister(env)
        skyrl_gym.register(env, make_env)
    return cfg.replace(env=env, data=str(data), train_prompts=0)


# ----------------------------------------------------------------------------- data
def _read_rows(path: Path) -> list[dict[str, Any]]:
    if path.is_dir():
        files = sorted(path.rglob("*.parquet")) or sorted(path.rglob("*.jsonl"))
        if not files:
            raise ConfigError(f"{path} holds no .parquet or .jsonl file")
        return [row for f in files for row in _read_rows(f)]
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    raise ConfigError(f"{path}: expected a .parquet, .jsonl or .json file, or a directory of them")


def load_published_rows(
    path: str | os.PathLike[str], db_path: str | os.PathLike[str]
) -> list[dict[str, Any]]:
    """The published training rows at ``path`` (a file or a directory of Parquet files), each
    checked to have its database under ``db_path``; raises :class:`ConfigError` saying what is
    missing and where to get it."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(
            f"no dataset at {p}. Download the published training set first, e.g.\n"
            f"  huggingface-cli download {PUBLISHED_DATASET} --repo-type dataset --local-dir {p}"
        )
    rows = _read_rows(p)
    need = ("prompt", "db_id", "data", "reward_spec")
    for i, row in enumerate(rows):
        lacking = [k for k in need if k not in row]
        if lacking:
            raise ConfigError(f"{p}: row {i} lacks {lacking}; the published format has {list(need)}")
    missing: dict[str, str] = {}
    for row in rows:
        try:
            resolve_db_file(row["db_id"], row["data"], str(db_path))
        except ConfigError:
            layout = LAYOUTS.get(row["data"], row["data"])
            missing.setdefault(f"{layout}/{row['db_id']}", row["data"])
    if missing:
        sample = ", ".join(sorted(missing)[:3])
        kinds = sorted(set(missing.values()))
        raise ConfigError(
            f"{len(missing)} database(s) used by {p.name} are missing under {db_path} (e.g. {sample}). "
            f"The recipe needs the {' and '.join(kinds)} databases: unpack OmniSQL's data release "
            f"(OmniSQL-datasets, data.zip) into {db_path} so that "
            f"{db_path}/<{'|'.join(LAYOUTS[k] for k in kinds if k in LAYOUTS)}>/<db_id>/<db_id>.sqlite exist"
        )
    for i, row in enumerate(rows):
        row.setdefault("id", f"published-{i:04d}")
    return rows


@dataclass
class Split:
    """One benchmark split: its rows and the ``env_config`` their databases need."""

    name: str
    rows: list[dict[str, Any]]
    env_config: dict[str, Any] = field(default_factory=dict)


def parse_split(spec: str) -> tuple[str, Path, Path | None]:
    """``NAME=FILE`` or ``NAME=FILE@DB_DIR`` (``DB_DIR`` holds ``<db_id>/<db_id>.sqlite``)."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ConfigError(f"--split takes NAME=FILE or NAME=FILE@DB_DIR, got {spec!r}")
    file, _, db_dir = rest.partition("@")
    return name, Path(file), Path(db_dir) if db_dir else None


def load_split(
    name: str,
    file: Path,
    db_dir: Path | None = None,
    *,
    db_path: str | None = None,
    max_turns: int = 5,
    limit: int = 0,
) -> Split:
    """A split from rows in the published format (databases under ``db_path``) or, with
    ``db_dir``, from a Spider-style JSON list of ``{"db_id", "question", "query"}`` (``SQL`` is
    accepted for ``query``) whose databases are ``db_dir/<db_id>/<db_id>.sqlite``."""
    if not file.exists():
        raise ConfigError(f"split {name!r}: no file {file}")
    raw = _read_rows(file)[: limit or None]
    if db_dir is None:
        for row in raw:
            resolve_db_file(row.get("db_id"), row.get("data", "bundled"), db_path)  # clear error if absent
        return Split(
            name, raw, {"db_path": db_path, "max_turns": max_turns} if db_path else {"max_turns": max_turns}
        )
    if not db_dir.is_dir():
        raise ConfigError(f"split {name!r}: database directory {db_dir} does not exist")
    # the env finds Spider databases at <db_path>/spider/database/<db_id>: point one at db_dir
    root = Path(tempfile.mkdtemp(prefix=f"skyrl-sql-{name}-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)  # holds only a link: db_dir stays
    (root / "spider").mkdir()
    (root / LAYOUTS["spider"]).symlink_to(db_dir.resolve(), target_is_directory=True)
    rows = []
    for i, q in enumerate(raw):
        gold = q.get("query") or q.get("SQL") or q.get("sql")
        if not gold or "question" not in q or "db_id" not in q:
            raise ConfigError(f"split {name!r}: item {i} needs db_id, question and query (or SQL)")
        db_file = db_dir / q["db_id"] / f"{q['db_id']}.sqlite"
        if not db_file.is_file():
            raise ConfigError(f"split {name!r}: item {i} needs {db_file}, which does not exist")
        row = make_row(q["question"], gold, q["db_id"], db_file, data="spider", max_turns=max_turns)
        row["id"] = f"{name}-{i:05d}"
        rows.append(row)
    return Split(name, rows, {"db_path": str(root), "max_turns": max_turns})


def bundled_splits(max_turns: int = 5, limit: int = 0) -> list[Split]:
    """The bundled held-out questions, one split per difficulty (easy, medium, hard)."""
    from skyrl_gym.envs.sql import load_bundled_rows

    rows = load_bundled_rows("eval", max_turns=max_turns)
    splits = []
    for level in ("easy", "medium", "hard"):
        chosen = [dict(r, id=r["extra_info"]["id"]) for r in rows if r["extra_info"]["difficulty"] == level]
        splits.append(Split(level, chosen[: limit or None], {"max_turns": max_turns}))
    return splits


# ----------------------------------------------------------------------------- evaluation
@dataclass
class SplitResult:
    """Execution accuracy of one model on one split."""

    accuracy: float
    """Fraction of episodes whose solution's rows equal the gold query's rows."""
    reward: float
    """Mean reward (-1 malformed, 0 wrong, 1 right)."""
    episodes: int
    masked: int


def evaluate_splits(
    policy: Any,
    splits: Sequence[Split],
    *,
    max_turns: int = 5,
    max_tokens_per_turn: int = 512,
    max_context_tokens: int = 8192,
    temperature: float = 0.0,
    top_p: float = 1.0,
    n: int = 1,
    concurrency: int = 16,
    seed: int = 0,
) -> dict[str, SplitResult]:
    """Play every split's questions with ``policy`` (observations appended inside the assistant
    turn, stopping at ``</sql>`` and ``</solution>``) and score them."""
    from skyrl_agent.engine import PromptItem, RolloutEngine
    from skyrl_agent.types import RolloutConfig, SamplingParams

    config = RolloutConfig(
        max_turns=max_turns,
        max_tokens_per_turn=max_tokens_per_turn,
        max_context_tokens=max_context_tokens,
        observation_style="inline",
        sampling=SamplingParams(temperature=temperature, top_p=top_p, stop=STOP),
        n_samples=n,
        concurrency=concurrency,
        seed=seed,
    )
    results = {}
    for split in splits:
        items = [
            PromptItem("text2sql", tuple(r["prompt"]), dict(split.env_config), dict(r), str(r.get("id", i)))
            for i, r in enumerate(split.rows)
        ]
        trajs = RolloutEngine(policy, config, progress=False).run_sync(items).trajectories
        good = [t for t in trajs if not t.masked]
        results[split.name] = SplitResult(
            accuracy=sum(bool(t.env_metrics.get("solved")) for t in good) / len(good) if good else 0.0,
            reward=sum(t.reward for t in good) / len(good) if good else 0.0,
            episodes=len(good),
            masked=len(trajs) - len(good),
        )
    return results


def results_table(rows: dict[str, dict[str, SplitResult]], metric: str = "accuracy") -> str:
    """A markdown table: one row per model, one column per split, then the average over splits
    (accuracy in percent with one decimal, as published; reward as is)."""
    splits = list(next(iter(rows.values())))
    lines = ["| Model | " + " | ".join(splits) + " | Avg |", "|---" * (len(splits) + 2) + "|"]
    for model, res in rows.items():
        values = [getattr(res[s], metric) for s in splits]
        cells = [f"{100 * v:.1f}" if metric == "accuracy" else f"{v:+.3f}" for v in values]
        avg = sum(values) / len(values)
        lines.append(
            f"| {model} | " + " | ".join(cells) + f" | {100 * avg:.1f} |"
            if metric == "accuracy"
            else f"| {model} | " + " | ".join(cells) + f" | {avg:+.3f} |"
        )
    return "\n".join(lines)
