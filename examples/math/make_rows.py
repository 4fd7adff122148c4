"""Write math rows for `skyrl train --data`: the bundled gsm8k-style problems or real GSM8K files.

    python examples/math/make_rows.py --env gsm8k --out runs/math/gsm8k
    python examples/math/make_rows.py --env gsm8k_multi_turn --max-turns 3 --out runs/math/multi_turn
    python examples/math/make_rows.py --env gsm8k --gsm8k-train train.parquet --gsm8k-test test.parquet --out runs/math/real

Writes ``train.jsonl`` and ``test.jsonl`` in ``--out``. Bundled problems are generated from
templates with a seed (train and test use disjoint random streams). ``--gsm8k-train`` and
``--gsm8k-test`` take GSM8K-format files (``question``, ``answer`` ending in ``#### N``; Parquet or
JSONL), for example the files of the ``openai/gsm8k`` dataset you downloaded. For
``gsm8k_multi_turn`` each row carries ``max_turns`` so that the env ends an episode exactly when
the trainer's turn budget does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _read(path: str) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"error: no GSM8K file at {p} (question/answer columns, .parquet or .jsonl)")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(p).to_pylist()
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> dict[str, int]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", choices=["gsm8k", "gsm8k_multi_turn"], default="gsm8k")
    ap.add_argument("--out", required=True, help="directory for train.jsonl and test.jsonl")
    ap.add_argument("--train", type=int, default=400, help="bundled training problems")
    ap.add_argument("--test", type=int, default=64, help="bundled held-out problems")
    ap.add_argument("--max-turns", type=int, default=3, help="turns per episode (multi-turn)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gsm8k-train", default=None, help="a GSM8K-format training file instead")
    ap.add_argument("--gsm8k-test", default=None, help="a GSM8K-format test file instead")
    args = ap.parse_args(argv)

    from skyrl_gym.envs.math import generate_problems, rows_from_gsm8k

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, n, real in (("train", args.train, args.gsm8k_train), ("test", args.test, args.gsm8k_test)):
        if real:
            rows = rows_from_gsm8k(_read(real), env_class=args.env)
        else:
            rows = generate_problems(n, split=split, seed=args.seed, env_class=args.env)
        with open(out / f"{split}.jsonl", "w", encoding="utf-8") as fh:
            for row in rows:
                if args.env == "gsm8k_multi_turn":
                    row = {**row, "max_turns": args.max_turns}
                fh.write(json.dumps(row) + "\n")
        counts[split] = len(rows)
    print(f"{args.env}: {counts['train']} training and {counts['test']} held-out rows in {out}/")
    return counts


if __name__ == "__main__":
    main()
