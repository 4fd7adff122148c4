"""Write SWE repair training rows (JSONL) for ``skyrl train --env swe --data FILE``.

    python examples/swe/make_rows.py --out runs/swe/rows.jsonl                  # the 8 bundled tasks
    python examples/swe/make_rows.py swe-gym.parquet --repos ~/repos --out runs/swe/rows.jsonl

Each row holds the episode's first messages (``prompt``: the tools and the issue), ``max_turns``
(so the env ends the episode, and grades it, when the trainer's turn budget does) and the
instance under ``instance``, with ``repo_path`` resolved to an absolute path (a clone or bundle
from ``--repos DIR``, named ``owner__name``), so training needs no ``repos_dir`` setting. Every
row's repository and base commit are checked before the file is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "tasks", nargs="?", help="SWE-bench-style instances (.jsonl, .json, .parquet); default: bundled"
    )
    ap.add_argument(
        "--repos", metavar="DIR", help="folder of repositories named owner__name (dir or .bundle)"
    )
    ap.add_argument("--max-turns", type=int, default=20, help="turns per episode (the trainer's --max-turns)")
    ap.add_argument("--instance", action="append", metavar="ID", help="only these instance ids (repeatable)")
    ap.add_argument("--limit", type=int, default=0, help="at most this many rows (0: all)")
    ap.add_argument("--out", required=True, help="the JSONL file to write")
    ap.add_argument(
        "--require-problem-statement",
        action="store_true",
        help="stop on a row without a problem statement instead of skipping it (and counting it)",
    )
    args = ap.parse_args(argv)

    from skyrl_gym.envs.swe import bundled_instances
    from skyrl_gym.envs.swe._repo import RepoSource, resolve_repo
    from skyrl_gym.envs.swe.cli import load_task_file
    from skyrl_gym.envs.swe.env import make_prompt
    from skyrl_gym.errors import SkyRLError

    try:
        if args.tasks:
            instances = load_task_file(args.tasks, args.require_problem_statement)
        else:
            instances = bundled_instances()
        if args.instance:
            wanted = set(args.instance)
            instances = [i for i in instances if i.instance_id in wanted]
            if len(instances) != len(wanted):
                found = {i.instance_id for i in instances}
                raise SystemExit(f"error: no instance(s) {sorted(wanted - found)} in the task file")
        instances = instances[: args.limit or None]
        rows = []
        for inst in instances:
            repo = resolve_repo(inst, args.repos).resolve()
            RepoSource(repo).commit(inst.base_commit)  # fail now on a commit that is not there
            inst = dataclasses.replace(inst, repo_path=str(repo))
            rows.append(
                {
                    "id": inst.instance_id,
                    "prompt": make_prompt(inst),
                    "max_turns": args.max_turns,
                    "instance": inst.to_row(),
                }
            )
    except SkyRLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} rows to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
