"""``skyrl swe``: grade predictions and check task files.

::

    skyrl swe grade TASKS PREDICTIONS.jsonl [--json] [--repos DIR] [--sandbox docker|local]
    skyrl swe check [TASKS] [--repos DIR] [--json] [--sandbox docker|local]

``grade`` takes predictions in the SWE-bench format (one JSON object a line, or a JSON list,
with ``instance_id``, ``model_name_or_path`` and ``model_patch``), grades each as the harness
does and prints a per-instance table; ``--json`` prints a list of objects with
``instance_id``, ``model_name_or_path``, ``resolved`` and the per-test results. Its exit code
is 0 when every prediction was graded (resolved or not), 1 when one could not be.

``check`` grades, for every instance of TASKS (the bundled tasks by default), the gold patch
(must be resolved) and the empty patch (must not be); its exit code is 0 only when every
instance behaves so. Also ``python -m skyrl_gym.envs.swe.cli ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = [
    "add_command",
    "main",
    "load_predictions",
    "load_task_file",
    "grade_predictions",
    "check_instances",
]


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Add ``skyrl swe`` (``grade``, ``check``) to the ``skyrl`` command."""
    p = subparsers.add_parser("swe", help="SWE-style tasks: grade predictions, check task files")
    verbs = p.add_subparsers(dest="swe_command", metavar="VERB", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--repos", metavar="DIR", help="folder of repositories named owner__name (dir or .bundle)"
        )
        q.add_argument("--sandbox", choices=("docker", "local"), default="docker", help="where tests run")
        q.add_argument("--workers", type=int, default=2, help="instances graded at once (default 2)")
        q.add_argument("--timeout", type=float, default=600.0, help="deadline of one test run, seconds")
        q.add_argument(
            "--instance", action="append", metavar="ID", help="only these instance ids (repeatable)"
        )
        q.add_argument("--json", action="store_true", help="print JSON instead of a table")
        q.add_argument(
            "--require-problem-statement",
            action="store_true",
            help="stop on a row without a problem statement instead of skipping it (and counting it)",
        )

    g = verbs.add_parser(
        "grade", help="grade SWE-bench predictions (instance_id, model_name_or_path, model_patch)"
    )
    g.add_argument("tasks", help="task file (.jsonl, .json or .parquet) with the instances")
    g.add_argument("predictions", help="predictions (.jsonl or a .json list)")
    common(g)
    g.set_defaults(handler=_grade)
    c = verbs.add_parser("check", help="check that gold patches resolve and empty patches do not")
    c.add_argument("tasks", nargs="?", help="task file (default: the bundled pocketlib tasks)")
    common(c)
    c.set_defaults(handler=_check)


def load_predictions(path: str | Path) -> list[dict[str, Any]]:
    """SWE-bench predictions from a ``.jsonl`` file or a ``.json`` list (or dict by id)."""
    from skyrl_gym.errors import ConfigError

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"predictions file {str(path)!r} does not exist")
    text = path.read_text()
    if path.suffix == ".json":
        data = json.loads(text)
        rows = list(data.values()) if isinstance(data, dict) else data
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{n}: not valid JSON ({exc})") from None
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise ConfigError(f"{path} prediction {n}: needs instance_id, model_name_or_path and model_patch")
        if row.get("model_patch") is not None and not isinstance(row["model_patch"], str):
            raise ConfigError(f"{path} prediction {n} ({row['instance_id']}): model_patch must be a string")
    return rows


def _config(args: argparse.Namespace) -> Any:
    from skyrl_gym.envs.swe.types import SWEEnvConfig

    return SWEEnvConfig(sandbox=args.sandbox, repos_dir=args.repos, test_timeout_s=args.timeout)


def _parallel(
    fn: Callable[[Any], dict[str, Any]], items: Sequence[Any], workers: int
) -> list[dict[str, Any]]:
    if workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


def _safe_grade(instance: Any, patch: str, config: Any) -> tuple[Any, str | None]:
    from skyrl_gym.envs.swe.grading import grade_patch
    from skyrl_gym.errors import SkyRLError

    try:
        return grade_patch(instance, patch, config=config), None
    except SkyRLError as exc:
        return None, f"{type(exc).__name__}: {exc}"


def grade_predictions(
    instances: Sequence[Any], predictions: Sequence[dict[str, Any]], config: Any, workers: int = 2
) -> list[dict[str, Any]]:
    """One result object per prediction (``instance_id``, ``model_name_or_path``, ``resolved``...)."""
    from skyrl_gym.errors import ConfigError, did_you_mean

    by_id = {i.instance_id: i for i in instances}
    for p in predictions:
        if p["instance_id"] not in by_id:
            raise ConfigError(
                f"prediction for unknown instance {p['instance_id']!r}."
                + did_you_mean(p["instance_id"], by_id)
            )

    def one(pred: dict[str, Any]) -> dict[str, Any]:
        report, error = _safe_grade(by_id[pred["instance_id"]], pred.get("model_patch") or "", config)
        row = {"instance_id": pred["instance_id"], "model_name_or_path": pred.get("model_name_or_path", "")}
        if report is None:
            return {**row, "resolved": False, "graded": False, "error": error}
        return {**row, **report.to_dict(), "graded": True}

    return _parallel(one, list(predictions), workers)


def check_instances(instances: Sequence[Any], config: Any, workers: int = 2) -> list[dict[str, Any]]:
    """For each instance: is the gold patch resolved and the empty patch not?"""

    def one(inst: Any) -> dict[str, Any]:
        gold, gold_error = _safe_grade(inst, inst.patch, config)
        empty, empty_error = _safe_grade(inst, "", config)
        gold_ok = gold is not None and gold.resolved
        empty_ok = empty is not None and not empty.resolved
        row: dict[str, Any] = {
            "instance_id": inst.instance_id,
            "gold_resolved": bool(gold and gold.resolved),
            "empty_resolved": bool(empty and empty.resolved),
            "ok": gold_ok and empty_ok,
        }
        if gold is not None:
            row["gold"] = gold.to_dict()
        if empty is not None:
            row["empty"] = empty.to_dict()
        errors = [e for e in (gold_error, empty_error) if e]
        for name, rep in (("gold", gold), ("empty", empty)):
            if rep is not None and rep.setup_error:  # the row lists tests its command never runs
                errors.append(f"{name} patch: listed tests never ran: {', '.join(rep.missing[:3])}")
        if errors:
            row["error"] = "; ".join(errors)
        return row

    return _parallel(one, list(instances), workers)


def _select(instances: list[Any], ids: Sequence[str] | None) -> list[Any]:
    from skyrl_gym.errors import ConfigError

    if not ids:
        return instances
    known = {i.instance_id for i in instances}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise ConfigError(f"unknown instance id(s) {unknown}")
    return [i for i in instances if i.instance_id in set(ids)]


def _frac(report: dict[str, Any] | None, key: str) -> str:
    if not report or f"{key}_total" not in report:
        return "-"
    return f"{report[f'{key}_passed']}/{report[f'{key}_total']}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def load_task_file(tasks: Any, require_problem_statement: bool = False) -> list[Any]:
    """The instances of a task file for a command: rows without a problem statement are skipped
    and counted on stderr, or, with ``require_problem_statement``, stop it with the error."""
    from skyrl_gym.envs.swe.instances import load_instances

    instances = load_instances(tasks, without_statement="error" if require_problem_statement else "skip")
    if instances.summary():
        print(f"{tasks}: {instances.summary()}", file=sys.stderr)
    return instances


def _grade(args: argparse.Namespace) -> int:
    instances = load_task_file(args.tasks, args.require_problem_statement)
    predictions = load_predictions(args.predictions)
    if args.instance:
        wanted = set(args.instance)
        predictions = [p for p in predictions if p["instance_id"] in wanted]
    results = grade_predictions(instances, predictions, _config(args), args.workers)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        rows = [
            [
                r["instance_id"],
                str(r["model_name_or_path"]),
                "yes" if r["resolved"] else "no",
                _frac(r, "f2p"),
                _frac(r, "p2p"),
                str(r.get("error") or ""),
            ]
            for r in results
        ]
        print(_table(["instance", "model", "resolved", "F2P", "P2P", "error"], rows))
        print(f"resolved {sum(r['resolved'] for r in results)}/{len(results)}")
    return 0 if all(r["graded"] for r in results) else 1


def _check(args: argparse.Namespace) -> int:
    from skyrl_gym.envs.swe.instances import BUNDLED_TASKS

    instances = _select(
        load_task_file(args.tasks or BUNDLED_TASKS, args.require_problem_statement), args.instance
    )
    results = check_instances(instances, _config(args), args.workers)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        rows = [
            [
                r["instance_id"],
                "resolved" if r["gold_resolved"] else "NOT resolved",
                _frac(r.get("gold"), "f2p"),
                "NOT resolved" if not r["empty_resolved"] else "resolved",
                _frac(r.get("empty"), "f2p"),
                "ok" if r["ok"] else "FAIL",
                str(r.get("error") or ""),
            ]
            for r in results
        ]
        print(_table(["instance", "gold patch", "F2P", "empty patch", "F2P", "", "error"], rows))
        print(f"{sum(r['ok'] for r in results)}/{len(results)} instances behave")
    return 0 if results and all(r["ok"] for r in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m skyrl_gym.envs.swe.cli VERB ...`` (the same as ``skyrl swe VERB ...``)."""
    from skyrl_gym.errors import SkyRLError

    parser = argparse.ArgumentParser(prog="skyrl")
    add_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["swe", *(argv if argv is not None else sys.argv[1:])])
    try:
        return int(args.handler(args))
    except SkyRLError as exc:
        print(f"skyrl swe: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
