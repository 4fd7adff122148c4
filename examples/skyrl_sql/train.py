"""Train the SkyRL-SQL recipe from a flags file, on the bundled data or the published data.

    python examples/skyrl_sql/train.py examples/skyrl_sql/cpu.flags
    python examples/skyrl_sql/train.py examples/skyrl_sql/gpu.flags \\
        --dataset data/SkyRL-SQL-653-data-newfmt --db-path data/sql_data [--dry-run] [-- --steps 10]

The flags file holds ``skyrl train`` flags (``#`` comments). ``--dataset`` is the published
653-row training set (a Parquet file or a directory of them); ``--db-path`` the directory where
OmniSQL's data release was unpacked (``SynSQL-2.5M/databases/``, ``spider/database/``). Every
row's database is checked before anything starts; a missing one is an error that says where
the files go. ``--dry-run`` stops after the checks and prints the configuration.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import recipe  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("flags", help="a flags file (cpu.flags, gpu.flags)")
    ap.add_argument("--dataset", default=None, help="the published training rows (file or directory)")
    ap.add_argument("--db-path", default=None, help="where SynSQL-2.5M/ and spider/ were unpacked")
    ap.add_argument("--dry-run", action="store_true", help="check config, data and databases; do not train")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]  # more skyrl train flags, after --

    from skyrl_gym.errors import SkyRLError

    try:
        cfg = recipe.train_config(recipe.read_flags(args.flags) + args.extra)
        cfg = recipe.prepare_run(cfg, args.dataset, args.db_path)
    except SkyRLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rows = sum(1 for _ in open(cfg.data.path, encoding="utf-8"))
    print(f"[sql] {rows} training rows in {cfg.data.path}; env {cfg.data.env}; model {cfg.model.path}")
    if args.dry_run:
        for name, value in cfg.as_settings().items():
            print(f"  {name:24s} {value!r}")
        return 0
    from trainers.loop import train

    result = train(cfg)
    print(f"run directory {result.run_dir}: {result.steps} steps in {result.seconds:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
