"""Search at CPU size: the generated task (cpu_data.py), GRPO, held-out success and observation use.

    python examples/search/cpu_run.py                      # cpu.flags: SmolLM2-135M, 2 cores
    python examples/search/cpu_run.py --run-dir runs/srch  # where the run writes
    python examples/search/cpu_run.py --smoke              # a tiny random model, one step (CI)
    python examples/search/cpu_run.py -- --steps 4         # extra `skyrl train` flags after --

The corpora and questions are generated under ``<run-dir>/data`` (:mod:`cpu_data`: held-out
questions ask about people of a separate held-out corpus, in other words). The run is
``skyrl train $(sed 's/#.*//' examples/search/cpu.flags)`` on the training rows, with held-out
success (``eval_samples`` episodes per question at the training temperature, a standard error
over questions) measured before the first step and after the last, written to
``<run-dir>/summary.json`` as ``skyrl train`` writes it (``baseline``/``final`` with ``success``
and ``success_se``, and the env's per-episode metrics averaged in ``env_metrics``), and plotted
in ``<run-dir>/metrics.png``. The last lines printed are success per question kind and the
observation-use metrics, before and after: ``answer_supported`` (the final answer appears in a
passage the agent was shown), searches and turns per episode.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import cpu_data  # noqa: E402

HERE = Path(__file__).resolve().parent
SMOKE = [
    "--steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--max-turns", "2",
    "--max-tokens-per-turn", "8", "--train-prompts", "4", "--eval-prompts", "3", "--eval-samples", "1",
]  # fmt: skip
#: The env metrics printed before and after (``search``'s per-episode metrics, averaged).
OBSERVATION_METRICS = ("correct", "answered", "answer_supported", "searches", "turns", "invalid_turns")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flags", default=str(HERE / "cpu.flags"), help="a flags file for skyrl train")
    ap.add_argument("--run-dir", default=None, help="where the run writes (default: the flags file's)")
    ap.add_argument("--smoke", action="store_true", help="a tiny random model and one step: seconds")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    extra = argv[cut + 1 :]  # more skyrl train flags, after --

    from trainers.config import config_from_flags, read_flags
    from trainers.evaluation import EvalResult, gain_in_se, success_by
    from trainers.loop import train

    flags = read_flags(args.flags) + (SMOKE if args.smoke else []) + extra
    if args.run_dir:
        flags += ["--run-dir", args.run_dir]
    cfg = config_from_flags(flags)
    run_dir = Path(cfg.run.run_dir)
    if args.smoke:
        from skyrl_agent.models import tiny_random_model

        model, tok = tiny_random_model(hidden_size=32, num_layers=1)
        model.save_pretrained(run_dir / "tiny-model")
        tok.save_pretrained(run_dir / "tiny-model")
        cfg = cfg.replace(model=str(run_dir / "tiny-model"))
    t0 = time.perf_counter()
    train_file, eval_file = cpu_data.write_task(
        run_dir / "data", seed=cfg.run.seed, max_turns=cfg.rollout.max_turns
    )
    cfg = cfg.replace(data=str(train_file), eval_data=str(eval_file))
    print(f"[search] task in {run_dir / 'data'}: {sum(1 for _ in open(train_file))} training and "
          f"{sum(1 for _ in open(eval_file))} held-out questions", file=sys.stderr)  # fmt: skip

    result = train(cfg)

    kind_of = {}
    with open(eval_file, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            kind_of[row["id"]] = row["extra_info"]["kind"]
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["per_kind"] = {
        label: success_by((summary.get(key) or {}).get("per_prompt") or {}, kind_of)
        for label, key in (("before", "baseline"), ("after", "final"))
    }
    summary["command_seconds"] = time.perf_counter() - t0
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    b, f = result.baseline, result.final
    if isinstance(b, EvalResult) and isinstance(f, EvalResult):
        print(
            f"\nHeld-out success ({cfg.data.eval_samples} samples per question, temperature {cfg.rollout.sampling.temperature}):"
        )
        print(f"  before {b.success:.3f} +/- {b.success_se:.3f}   after {f.success:.3f} +/- {f.success_se:.3f}   "
              f"gain {f.success - b.success:+.3f} ({gain_in_se(b, f):.1f} standard errors)")  # fmt: skip
        for kind, rate in summary["per_kind"]["before"].items():
            print(f"  {kind:13s} {rate:.2f} -> {summary['per_kind']['after'].get(kind, 0.0):.2f}")
        print("Observation use per episode (answer_supported: the answer is in a passage it was shown):")
        for name in OBSERVATION_METRICS:
            print(f"  {name:17s} {b.env_metrics.get(name, 0.0):.3f} -> {f.env_metrics.get(name, 0.0):.3f}")
    print(f"\nrun directory {run_dir} ({summary['command_seconds']:.0f}s in all)")
    return summary


if __name__ == "__main__":
    main()
