"""SkyRL-SQL at CPU size: evaluate, train with GRPO, evaluate again; print the before/after table.

    python examples/skyrl_sql/cpu_run.py                  # cpu.flags: SmolLM2-135M, bundled databases
    python examples/skyrl_sql/cpu_run.py --smoke          # a tiny random model, one step (CI)
    python examples/skyrl_sql/cpu_run.py -- --steps 4     # extra `skyrl train` flags after --

The training run is ``skyrl train $(sed 's/#.*//' examples/skyrl_sql/cpu.flags)`` on the bundled
training questions written with ``max_turns`` per row (``train.py`` does the same); the
evaluation plays the bundled held-out questions (4 easy, 4 medium, 8 hard) greedily with the
starting weights and with the final checkpoint, and prints execution accuracy per difficulty in
the published table's layout, then the mean reward (-1 malformed, 0 wrong, 1 right).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import recipe  # noqa: E402

SMOKE = [
    "--steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--max-turns", "2",
    "--max-tokens-per-turn", "8", "--train-prompts", "4",
]  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flags", default=str(recipe.HERE / "cpu.flags"), help="a flags file for skyrl train")
    ap.add_argument("--smoke", action="store_true", help="a tiny random model and one step: seconds")
    ap.add_argument("--eval-limit", type=int, default=0, help="at most this many questions per difficulty")
    ap.add_argument(
        "--eval-tokens", type=int, default=0, help="tokens per turn in evaluation (0: as trained)"
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]  # more skyrl train flags, after --

    from skyrl_agent.policies.hf import HFPolicy
    from trainers.checkpoint import latest_checkpoint, load_weights
    from trainers.loop import train

    flags = recipe.read_flags(args.flags)
    if args.smoke:
        flags += SMOKE
        args.eval_limit = args.eval_limit or 1
    cfg = recipe.train_config(flags + args.extra)
    run_dir = Path(cfg.run_dir)
    if args.smoke:
        from skyrl_agent.models import tiny_random_model

        model, tok = tiny_random_model(hidden_size=32, num_layers=1)
        model.save_pretrained(run_dir / "tiny-model")
        tok.save_pretrained(run_dir / "tiny-model")
        cfg = dataclasses.replace(cfg, model=str(run_dir / "tiny-model"))
    cfg = recipe.prepare_run(dataclasses.replace(cfg, eval_prompts=0))  # this script evaluates
    splits = recipe.bundled_splits(cfg.max_turns, args.eval_limit)
    eval_kw = dict(
        max_turns=cfg.max_turns,
        max_tokens_per_turn=args.eval_tokens or cfg.max_tokens_per_turn,
        max_context_tokens=cfg.max_context_tokens,
        concurrency=cfg.concurrency,
    )

    t0 = time.perf_counter()
    policy = HFPolicy.from_pretrained(cfg.model, max_batch_size=32)
    before = recipe.evaluate_splits(policy, splits, **eval_kw)
    policy.close()
    print(f"[sql] evaluated the starting model in {time.perf_counter() - t0:.0f}s", file=sys.stderr)

    result = train(cfg)

    ckpt = latest_checkpoint(run_dir)
    policy = HFPolicy.from_pretrained(cfg.model, max_batch_size=32)
    load_weights(policy.model, ckpt)  # the trained weights (a model directory in the checkpoint)
    after = recipe.evaluate_splits(policy, splits, **eval_kw)
    policy.close()

    label = Path(cfg.model).name
    table = {f"{label} (start)": before, f"{label} + GRPO, {result.steps} steps": after}
    print(f"\nExecution accuracy (%) on the bundled held-out questions, {cfg.max_turns} turns, greedy:")
    print(recipe.results_table(table))
    print("\nMean reward (-1 malformed, 0 wrong, 1 right):")
    print(recipe.results_table(table, "reward"))
    print(f"\nrun directory {run_dir} ({time.perf_counter() - t0:.0f}s in all)")
    out = {name: {split: dataclasses.asdict(r) for split, r in res.items()} for name, res in table.items()}
    (run_dir / "before_after.json").write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
