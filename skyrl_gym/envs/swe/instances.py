"""Load SWE task instances from JSONL, Parquet, JSON or a ``datasets.Dataset``.

Published SWE-bench, SWE-bench Verified, SWE-Gym and SWE-smith rows load as they are:
``FAIL_TO_PASS`` and ``PASS_TO_PASS`` may be JSON-encoded strings (as SWE-bench publishes them)
or real lists (as SWE-smith does). A SWE-smith row (no ``test_patch``; its ``patch`` puts the
bug in) is read as :mod:`skyrl_gym.envs.swe.swesmith` describes. A relative ``repo_path`` is taken
relative to the task file. A bad row raises :class:`~skyrl_gym.errors.ConfigError` naming the
file, the row and the field. A row without a problem statement (most published SWE-smith rows
have none: the issue text is generated for a subset) is skipped by :func:`load_instances` and
counted in :attr:`Instances.skipped`, unless ``without_statement="error"``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from skyrl_gym.envs.swe.patches import reverse_patch
from skyrl_gym.envs.swe.swebench_grading import swebench_parser_name
from skyrl_gym.envs.swe.swesmith import base_commit_of, is_swesmith_row, pytest_problem, upstream_repo
from skyrl_gym.envs.swe.types import DEFAULT_BASE_IMAGE, SWEInstance
from skyrl_gym.errors import ConfigError

__all__ = [
    "instance_from_row",
    "load_instances",
    "Instances",
    "WITHOUT_STATEMENT",
    "bundled_instances",
    "bundled_swesmith_instances",
    "BUNDLED_TASKS",
    "BUNDLED_SWESMITH",
    "BUNDLED_DIR",
]

BUNDLED_DIR = Path(__file__).parent / "data"
#: The bundled task file: 13 bug-fix tasks in three repositories (``pocketlib``, ``ledgerlite``,
#: ``gridkit``; see :mod:`skyrl_gym.envs.swe._make_bundle`).
BUNDLED_TASKS = BUNDLED_DIR / "tasks.jsonl"
#: Rows in SWE-smith's published shape (bugs put into pocketlib's last commit), loaded unchanged;
#: their repository is found as ``repos_dir`` finds a SWE-smith mirror (``pocketlib.bundle``).
BUNDLED_SWESMITH = BUNDLED_DIR / "swesmith.jsonl"

_REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch")
_KNOWN = set(_REQUIRED) | {
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "version",
    "environment_setup_commit",
    "hints_text",
    "repo_path",
    "image",
    "environment_setup",
    "install",
    "test_cmd",
    "log_parser",
}


def _test_list(value: Any, field: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: {field} is a string but not a JSON list ({exc})") from None
    if hasattr(value, "tolist"):  # a numpy array from Parquet
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise ConfigError(f"{where}: {field} must be a list of test ids (or its JSON string)")
    return tuple(value)


def _commands(value: Any, field: str, where: str) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        return (value,)
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(c, str) for c in value):
        raise ConfigError(f"{where}: {field} must be a shell command or a list of them")
    return tuple(value)


def instance_from_row(
    row: Mapping[str, Any], *, base_dir: str | os.PathLike[str] | None = None, where: str = "row"
) -> SWEInstance:
    """One :class:`SWEInstance` from a row; ``base_dir`` anchors a relative ``repo_path``."""
    if not isinstance(row, Mapping):
        raise ConfigError(f"{where}: expected an object with SWE-bench fields, got {type(row).__name__}")
    if is_swesmith_row(row):
        return _smith_instance(row, base_dir=base_dir, where=where)
    missing = [
        k for k in _REQUIRED if not isinstance(row.get(k), str) or (k != "test_patch" and not row.get(k))
    ]
    if missing:
        raise ConfigError(
            f"{where}: missing or empty field(s) {missing}; an instance needs {list(_REQUIRED)} "
            "as strings (plus FAIL_TO_PASS and PASS_TO_PASS)"
        )
    label = f"{where} ({row['instance_id']})"
    if "/" not in row["repo"]:
        raise ConfigError(f"{label}: repo must be 'owner/name', got {row['repo']!r}")
    f2p = _test_list(row.get("FAIL_TO_PASS"), "FAIL_TO_PASS", label)
    p2p = _test_list(row.get("PASS_TO_PASS"), "PASS_TO_PASS", label)
    if not f2p:
        raise ConfigError(
            f"{label}: FAIL_TO_PASS is empty; a task needs at least one test that the fix makes pass"
        )
    if not row["test_patch"].strip():
        raise ConfigError(f"{label}: test_patch is empty; the hidden tests come from it")
    return SWEInstance(
        instance_id=str(row["instance_id"]),
        repo=row["repo"],
        base_commit=row["base_commit"],
        problem_statement=row["problem_statement"],
        patch=row["patch"],
        test_patch=row["test_patch"],
        FAIL_TO_PASS=f2p,
        PASS_TO_PASS=p2p,
        version=str(row.get("version") or ""),
        environment_setup_commit=str(row.get("environment_setup_commit") or ""),
        hints_text=str(row.get("hints_text") or ""),
        **_our_fields(row, base_dir, label),
    )


def _our_fields(
    row: Mapping[str, Any], base_dir: str | os.PathLike[str] | None, label: str, repo: str | None = None
) -> dict[str, Any]:
    """The fields this project adds to the published schemas, and the row's other columns."""
    repo_path = row.get("repo_path") or None
    if repo_path is not None:
        path = Path(str(repo_path))
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        repo_path = str(path)
    return dict(
        repo_path=repo_path,
        image=str(row.get("image") or DEFAULT_BASE_IMAGE),
        environment_setup=_commands(row.get("environment_setup"), "environment_setup", label),
        install=_commands(row.get("install"), "install", label),
        test_cmd=str(row.get("test_cmd") or ""),
        # SWE-bench's own parser for the repositories it knows (Django's runner, sympy's, ...)
        log_parser=str(row.get("log_parser") or swebench_parser_name(repo or str(row["repo"])) or "pytest"),
        extra={k: v for k, v in row.items() if k not in _KNOWN},
    )


_SMITH_REQUIRED = ("instance_id", "repo", "patch", "problem_statement")


def _smith_instance(
    row: Mapping[str, Any], *, base_dir: str | os.PathLike[str] | None, where: str
) -> SWEInstance:
    """An instance from a SWE-smith row (see :mod:`skyrl_gym.envs.swe.swesmith`)."""
    missing = [k for k in _SMITH_REQUIRED if not isinstance(row.get(k), str) or not row.get(k)]
    if missing:
        raise ConfigError(
            f"{where}: missing or empty field(s) {missing} of a SWE-smith row (no test_patch, a "
            f"swesmith/ repo or an image_name); it needs {list(_SMITH_REQUIRED)} as strings "
            "plus FAIL_TO_PASS and PASS_TO_PASS"
        )
    label = f"{where} ({row['instance_id']})"
    base = base_commit_of(row)
    if base is None:
        raise ConfigError(
            f"{label}: a SWE-smith row needs a base_commit, or a repo named "
            f"'swesmith/<owner>__<name>.<commit>'; got repo {row['repo']!r}"
        )
    f2p = _test_list(row.get("FAIL_TO_PASS"), "FAIL_TO_PASS", label)
    p2p = _test_list(row.get("PASS_TO_PASS"), "PASS_TO_PASS", label)
    if not f2p:
        raise ConfigError(f"{label}: FAIL_TO_PASS is empty; a task needs at least one test the bug breaks")
    upstream = upstream_repo(row)
    if not row.get("log_parser") and (problem := pytest_problem(upstream, f2p)):
        raise ConfigError(f"{label}: {problem}")
    try:
        gold = reverse_patch(row["patch"])
    except ValueError as exc:
        raise ConfigError(
            f"{label}: the row's patch (the bug) cannot be reversed into a fix: {exc}"
        ) from None
    return SWEInstance(
        instance_id=str(row["instance_id"]),
        repo=str(row["repo"]),
        base_commit=base,
        problem_statement=row["problem_statement"],
        patch=gold,
        test_patch="",
        FAIL_TO_PASS=f2p,
        PASS_TO_PASS=p2p,
        hints_text=str(row.get("hints_text") or ""),
        bug_patch=row["patch"],
        # SWE-bench's own parser where it has one for the repository the mirror copies
        **_our_fields(row, base_dir, label, repo=upstream),
    )


def _rows_of(source: Any) -> tuple[Iterable[Mapping[str, Any]], Path | None, str]:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise ConfigError(f"task file {str(path)!r} does not exist")
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            rows = []
            with open(path) as f:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise ConfigError(f"{path}:{n}: not valid JSON ({exc})") from None
            return rows, path.parent, str(path)
        if suffix == ".json":
            data = json.loads(path.read_text())
            if not isinstance(data, list):
                raise ConfigError(f"{path}: expected a JSON list of instances")
            return data, path.parent, str(path)
        if suffix == ".parquet":
            try:
                import pyarrow.parquet as pq
            except ImportError as exc:
                from skyrl_gym.errors import MissingDependencyError

                raise MissingDependencyError("pyarrow", "training", "reading Parquet task files") from exc
            return pq.read_table(path).to_pylist(), path.parent, str(path)
        raise ConfigError(f"task file {str(path)!r}: use .jsonl, .json or .parquet")
    if hasattr(source, "column_names") and hasattr(source, "__iter__"):  # a datasets.Dataset
        return list(source), None, "dataset"
    if isinstance(source, (list, tuple)):
        return source, None, "rows"
    raise ConfigError(f"cannot load instances from {type(source).__name__}; pass a path, rows or a Dataset")


#: What :func:`load_instances` does with a row without a problem statement.
WITHOUT_STATEMENT = ("skip", "error")


class Instances(list):
    """The instances of a task file (a list of :class:`SWEInstance`), with what was left out."""

    skipped: dict[str, list[str]]
    """Reason -> the instance ids (or row numbers) of the rows left out."""

    def __init__(self, items: Iterable[SWEInstance] = (), skipped: dict[str, list[str]] | None = None):
        super().__init__(items)
        self.skipped = dict(skipped or {})

    def summary(self) -> str:
        """One line for the user: how many rows were left out and why ("" when none were)."""
        parts = [f"{len(ids)} {reason}" for reason, ids in self.skipped.items() if ids]
        if not parts:
            return ""
        return (
            f"skipped {', '.join(parts)} (--require-problem-statement, or "
            "without_statement='error' in Python, stops on them instead)"
        )


_NO_STATEMENT = "rows without a problem statement"


def _has_statement(row: Any) -> bool:
    statement = row.get("problem_statement") if isinstance(row, Mapping) else None
    return isinstance(statement, str) and bool(statement.strip())


def load_instances(
    source: str | os.PathLike[str] | Iterable[Mapping[str, Any]] | Any,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    without_statement: str = "skip",
) -> Instances:
    """Instances from a ``.jsonl``/``.json``/``.parquet`` file, a list of rows or a
    ``datasets.Dataset``. Instance ids must be unique. ``without_statement``: ``"skip"`` leaves
    out a row whose ``problem_statement`` is missing or blank, counted in the result's
    ``skipped``; ``"error"`` raises :class:`ConfigError` on it (as on any other bad row)."""
    if without_statement not in WITHOUT_STATEMENT:
        raise ConfigError(f"without_statement must be one of {WITHOUT_STATEMENT}, got {without_statement!r}")
    rows, file_dir, name = _rows_of(source)
    anchor = base_dir if base_dir is not None else file_dir
    out = Instances(skipped={_NO_STATEMENT: []})
    for n, row in enumerate(rows, 1):
        if without_statement == "skip" and isinstance(row, Mapping) and not _has_statement(row):
            out.skipped[_NO_STATEMENT].append(str(row.get("instance_id") or f"{name} row {n}"))
            continue
        out.append(instance_from_row(row, base_dir=anchor, where=f"{name} row {n}"))
    if not out and out.skipped[_NO_STATEMENT]:
        raise ConfigError(
            f"{name}: none of its {len(out.skipped[_NO_STATEMENT])} rows has a problem statement; "
            "an agent needs the issue text to work from"
        )
    seen: set[str] = set()
    for inst in out:
        if inst.instance_id in seen:
            raise ConfigError(f"{name}: instance_id {inst.instance_id!r} appears twice")
        seen.add(inst.instance_id)
    return out


def bundled_instances() -> list[SWEInstance]:
    """The bundled tasks (pocketlib's, then ledgerlite's, then gridkit's; each repository is a
    bundled git bundle)."""
    return load_instances(BUNDLED_TASKS)


def bundled_swesmith_instances() -> list[SWEInstance]:
    """The bundled SWE-smith rows, with ``repo_path`` set to their bundle (the rows themselves
    carry only SWE-smith's columns; ``skyrl swe check --repos`` with the data folder finds it too)."""
    import dataclasses

    from skyrl_gym.envs.swe._repo import resolve_repo

    return [
        dataclasses.replace(inst, repo_path=str(resolve_repo(inst, BUNDLED_DIR)))
        for inst in load_instances(BUNDLED_SWESMITH)
    ]
