"""Evaluate models on text-to-SQL benchmark splits; print the published table.

    # the bundled held-out questions (one column per difficulty), the bundled model, on CPU
    python examples/skyrl_sql/evaluate.py --bundled

    # the published layout: Spider dev/test/realistic/DK/syn, 5 turns, greedy, a vLLM server
    python examples/skyrl_sql/evaluate.py --model Qwen/Qwen2.5-Coder-7B-Instruct \\
        --base-url http://127.0.0.1:8000/v1 \\
        --split Dev=$SPIDER/dev.json@$SPIDER/database --split Test=$SPIDER/test.json@$SPIDER/test_database ...

Each ``--split NAME=FILE[@DB_DIR]`` is a column, in the order given. FILE holds rows in the
published format (databases under ``--db-path``) or, with ``@DB_DIR``, a Spider-style JSON list
of ``{"db_id", "question", "query"}`` whose databases are ``DB_DIR/<db_id>/<db_id>.sqlite``.
``--model`` may be given several times: one table row per model. Without ``--base-url`` the
models run in this process (transformers, ``--device``); with it, they are served by a vLLM or
other OpenAI-compatible server (token ids in and out).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import recipe  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", action="append", help="model directory or hub id (repeatable; default: smollm2-135m)"
    )
    ap.add_argument("--name", action="append", help="table label per --model (default: the model)")
    ap.add_argument("--split", action="append", default=[], help="NAME=FILE[@DB_DIR] (repeatable)")
    ap.add_argument("--bundled", action="store_true", help="the bundled held-out questions by difficulty")
    ap.add_argument("--db-path", default=None, help="root of the published databases (SynSQL-2.5M/, spider/)")
    ap.add_argument("--limit", type=int, default=0, help="at most this many questions per split")
    ap.add_argument("--max-turns", type=int, default=5, help="turns per episode (published evaluation: 5)")
    ap.add_argument("--max-tokens-per-turn", type=int, default=512)
    ap.add_argument("--max-context", type=int, default=8192, help="most tokens per episode")
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--n", type=int, default=1, help="samples per question")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--base-url", default=None, help="an OpenAI-compatible server (vLLM) serving --model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rewards", action="store_true", help="also print the mean reward table")
    args = ap.parse_args(argv)

    if not args.split and not args.bundled:
        ap.error("give --split NAME=FILE[@DB_DIR] (repeatable) or --bundled")
    splits = recipe.bundled_splits(args.max_turns, args.limit) if args.bundled else []
    for spec in args.split:
        name, file, db_dir = recipe.parse_split(spec)
        splits.append(
            recipe.load_split(
                name, file, db_dir, db_path=args.db_path, max_turns=args.max_turns, limit=args.limit
            )
        )
    models = args.model or ["smollm2-135m"]
    names = args.name or models
    if len(names) != len(models):
        ap.error("give one --name per --model")

    table = {}
    for model, name in zip(models, names, strict=True):
        t0 = time.perf_counter()
        policy = _policy(model, args)
        try:
            table[name] = recipe.evaluate_splits(
                policy,
                splits,
                max_turns=args.max_turns,
                max_tokens_per_turn=args.max_tokens_per_turn,
                max_context_tokens=args.max_context,
                temperature=args.temperature,
                top_p=args.top_p,
                n=args.n,
                concurrency=args.concurrency,
            )
        finally:
            close = getattr(policy, "close", None)
            if close is not None:
                close()
        episodes = sum(r.episodes for r in table[name].values())
        print(f"[eval] {name}: {episodes} episodes in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    print(f"Execution accuracy (%), {args.max_turns} turns:")
    print(recipe.results_table(table))
    if args.rewards:
        print("\nMean reward (-1 malformed, 0 wrong, 1 right):")
        print(recipe.results_table(table, "reward"))
    return table


def _policy(model: str, args: argparse.Namespace):
    if args.base_url:
        from skyrl_agent.models import load_tokenizer
        from skyrl_agent.policies.openai_compat import OpenAICompatPolicy

        return OpenAICompatPolicy(args.base_url, model, load_tokenizer(model))
    from skyrl_agent.policies.hf import HFPolicy

    return HFPolicy.from_pretrained(model, device=args.device)


if __name__ == "__main__":
    main()
