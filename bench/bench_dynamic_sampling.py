"""Dynamic sampling (DAPO) on the main job's env: does every update get a full batch of
informative groups, and what does it cost in generation?

Two short training runs of the same model on the same prompts with the same seed (the main
job's settings, ``TrainConfig`` defaults, without held-out evaluation): the baseline drops
equal-reward groups and trains on what is left; ``--dynamic-sampling`` keeps drawing prompts
until ``prompts_per_step`` groups are informative or ``--max-sampling-rounds`` ran out. Printed
per step: informative groups in the update, sampling rounds, prompts drawn and generation
seconds; then the means and the ratios dynamic / baseline. Both runs start from the same
weights, but their updates differ from the first step on, so later steps are not paired.

    python bench/bench_dynamic_sampling.py                    # bundled SmolLM2-135M, 3 steps
    python bench/bench_dynamic_sampling.py --steps 5 --max-sampling-rounds 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(args: argparse.Namespace, dynamic: bool) -> tuple[list[dict], float]:
    from trainers.config import TrainConfig
    from trainers.loop import train

    run_dir = Path(args.run_dir) / ("dynamic" if dynamic else "baseline")
    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = TrainConfig(
        model=args.model,
        steps=args.steps,
        eval_prompts=0,
        dynamic_sampling=dynamic,
        max_sampling_rounds=args.max_sampling_rounds,
        run_dir=str(run_dir),
        checkpoint_every=10_000,
        keep_checkpoints=1,
        seed=args.seed,
        progress=True,
        report_to=(),
    )
    t0 = time.perf_counter()
    train(cfg)
    seconds = time.perf_counter() - t0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    for r in steps:
        groups = {t["group_id"] for t in trajs if t["step"] == r["step"]}
        r["informative"] = len(groups) - r["flat_groups"]
    return steps, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--max-sampling-rounds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-dir", default="runs/bench-dynamic-sampling")
    args = ap.parse_args()
    from trainers.config import TrainConfig

    need = TrainConfig().run.prompts_per_step
    results = {name: run(args, dynamic) for name, dynamic in (("baseline", False), ("dynamic", True))}
    print(
        f"\nmain job's env (calculator), {args.steps} steps, {need} prompts x {TrainConfig().group_size} samples a step"
    )
    print(f"{'run':9s} {'step':>4s} {'informative':>11s} {'rounds':>6s} {'prompts':>7s} {'gen s':>7s}")
    for name, (steps, _) in results.items():
        for r in steps:
            print(
                f"{name:9s} {r['step']:4d} {r['informative']:>8d}/{need:<2d} {r['sampling_rounds']:6d} "
                f"{r['prompts_drawn']:7d} {r['gen_seconds']:7.1f}"
            )
    mean = {
        name: {
            key: sum(r[key] for r in steps) / len(steps)
            for key in ("informative", "sampling_rounds", "prompts_drawn", "gen_seconds")
        }
        for name, (steps, _) in results.items()
    }
    full = {name: sum(r["informative"] >= need for r in steps) for name, (steps, _) in results.items()}
    for name in results:
        m = mean[name]
        print(
            f"{name:9s} mean informative groups {m['informative']:.2f}/{need}, full batches "
            f"{full[name]}/{args.steps}, sampling rounds per step {m['sampling_rounds']:.2f} "
            f"(extra rounds {m['sampling_rounds'] - 1:.2f}), generation {m['gen_seconds']:.1f} s/step, "
            f"run {results[name][1]:.0f} s"
        )
    b, d = mean["baseline"], mean["dynamic"]
    print(
        f"ratio dynamic/baseline: informative groups per update {d['informative'] / max(b['informative'], 1e-9):.2f}x, "
        f"generation time per step {d['gen_seconds'] / b['gen_seconds']:.2f}x"
    )


if __name__ == "__main__":
    main()
