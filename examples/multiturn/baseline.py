"""The untrained model's success on *training* rows, at the training temperature.

Used to design a multi-turn task's prompt (worked examples, wording) until the bundled model's
sampled baseline is in the band where GRPO has signal (5-40%), without ever looking at the
held-out rows, which the before/after numbers of a recipe come from::

    python examples/multiturn/baseline.py -- --env kvchain $(sed 's/#.*//' examples/multiturn/multiturn.flags)
    python examples/multiturn/baseline.py --rows 32 --samples 4 -- --env bisect --env-config examples=2

Everything after ``--`` is ``skyrl train`` flags (the run's own), so the rollouts are exactly
the training run's: its prompts, budgets, stop strings and temperature. Prints one JSON line:
success with its standard error over rows, turns per episode and per successful episode, and
the env's metrics averaged over episodes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=32, help="training rows to play (the first N)")
    ap.add_argument("--samples", type=int, default=4, help="episodes per row")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv[:cut])

    from trainers.config import config_from_flags
    from trainers.data import load_items
    from trainers.distributed import SINGLE
    from trainers.evaluation import evaluate
    from trainers.models import build_learner

    cfg = config_from_flags(argv[cut + 1 :])
    cfg = cfg.replace(eval_samples=args.samples, progress=False)
    if cfg.model.bf16 is None:
        from skyrl_agent.models import bf16_is_native

        cfg = cfg.replace(bf16=bf16_is_native("cpu"))
    items = load_items(cfg.data.env, "train", args.rows, path=cfg.data.path, seed=cfg.run.seed)
    learner = build_learner(cfg, SINGLE)
    t0 = time.perf_counter()
    res = evaluate(learner.eval_policy, cfg, items, seed=args.seed)
    out = {
        "env": cfg.data.env,
        "env_config": list(cfg.data.env_config),
        "split": "train",
        "rows": len(items),
        "samples": args.samples,
        "temperature": cfg.rollout.sampling.temperature,
        "success": round(res.success, 4),
        "success_se": round(res.success_se, 4),
        "turns_mean": round(res.turns_mean, 3),
        "turns_success_mean": None if res.turns_success_mean is None else round(res.turns_success_mean, 3),
        "episodes": res.episodes,
        "masked": res.masked,
        "seconds": round(time.perf_counter() - t0, 1),
        "env_metrics": {k: round(v, 4) for k, v in res.env_metrics.items()},
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
