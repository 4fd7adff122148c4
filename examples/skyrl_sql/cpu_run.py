"""SkyRL-SQL at CPU size: the generated task (cpu_data.py), GRPO, held-out success before and after.

    python examples/skyrl_sql/cpu_run.py                      # cpu.flags: SmolLM2-135M, 2 cores
    python examples/skyrl_sql/cpu_run.py --run-dir runs/sql   # where the run writes
    python examples/skyrl_sql/cpu_run.py --smoke              # a tiny random model, one step (CI)
    python examples/skyrl_sql/cpu_run.py -- --steps 4         # extra `skyrl train` flags after --
    python examples/skyrl_sql/cpu_run.py --hidden create      # the schema hidden (hidden_data.py)
    python examples/skyrl_sql/cpu_run.py --hidden create --hidden-examples 3  # three worked episodes

The databases and questions are generated under ``<run-dir>/data`` (:mod:`cpu_data`: held-out
databases have schemas training never saw, and held-out questions a different wording). The
run is ``skyrl train $(sed 's/#.*//' examples/skyrl_sql/cpu.flags)`` on those training rows,
with held-out success (``eval_samples`` episodes per question at the training temperature, a
standard error over questions) measured before the first step and after the last, written to
``<run-dir>/summary.json`` as ``skyrl train`` writes it (``baseline``/``final`` with ``success``
and ``success_se``), and plotted in ``<run-dir>/metrics.png``. The last lines printed are the
held-out success per question shape, before and after.

``--hidden EXAMPLE`` writes the hidden-schema task of :mod:`hidden_data` instead (the same
domains under names the questions do not give away, the schema left out of the prompt, and the
worked episode ``EXAMPLE``: ``create`` or ``pragma``), for the run's ``--max-turns``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import cpu_data  # noqa: E402
import hidden_data  # noqa: E402
import recipe  # noqa: E402

if TYPE_CHECKING:
    from trainers.config import TrainConfig

SMOKE = [
    "--steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--max-turns", "2",
    "--max-tokens-per-turn", "8", "--train-prompts", "4", "--eval-prompts", "3", "--eval-samples", "1",
]  # fmt: skip


def per_shape(summary: dict, eval_file: Path) -> dict[str, dict[str, float]]:
    """Held-out success per question shape, before and after, from the per-question success
    rates in ``summary.json``."""
    from trainers.evaluation import success_by

    shape = {}
    with open(eval_file, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            shape[row["id"]] = row["extra_info"]["shape"]
    return {
        label: success_by((summary.get(key) or {}).get("per_prompt") or {}, shape)
        for label, key in (("before", "baseline"), ("after", "final"))
    }


def with_task(
    cfg: TrainConfig,
    data_dir: Path,
    hidden: str | None = None,
    examples: int = 1,
    shapes: Sequence[str] | None = None,
    eval_databases: int = 2,
) -> tuple[TrainConfig, Path]:
    """Write the task under ``data_dir`` (:mod:`cpu_data`'s, or :mod:`hidden_data`'s with the
    worked episode ``hidden``, ``examples`` of them, questions of ``shapes`` only if given,
    ``eval_databases`` held-out databases a held-out domain) for
    ``cfg``'s turns and seed; return ``cfg`` training on it, with its held-out rows and
    databases, and the held-out file."""
    if hidden:
        train_file, eval_file = hidden_data.write_task(
            data_dir,
            max_turns=cfg.rollout.max_turns,
            seed=cfg.run.seed,
            example=hidden,
            examples=examples,
            shapes=shapes,
            eval_databases=eval_databases,
        )
    elif shapes is not None or eval_databases != 2:
        raise ValueError("shapes and eval_databases set the hidden-schema task only (hidden=...)")
    else:
        train_file, eval_file = cpu_data.write_task(
            data_dir, max_turns=cfg.rollout.max_turns, seed=cfg.run.seed
        )
    # cfg.replace sets these settings inside their parts (dataclasses.replace would rebuild the
    # data part from the defaults, env included)
    cfg = cfg.replace(
        data=str(train_file),
        eval_data=str(eval_file),
        env_config=(*cfg.data.env_config, f"text2sql.db_path={Path(data_dir).resolve()}"),
    )
    print(f"[sql] task in {data_dir}: {sum(1 for _ in open(train_file))} training and "
          f"{sum(1 for _ in open(eval_file))} held-out questions", file=sys.stderr)  # fmt: skip
    return cfg, Path(eval_file)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flags", default=str(recipe.HERE / "cpu.flags"), help="a flags file for skyrl train")
    ap.add_argument("--run-dir", default=None, help="where the run writes (default: the flags file's)")
    ap.add_argument("--smoke", action="store_true", help="a tiny random model and one step: seconds")
    ap.add_argument(
        "--hidden",
        choices=sorted(hidden_data.EXAMPLES),
        default=None,
        help="the hidden-schema task (hidden_data.py) with this worked episode, instead of cpu_data.py's",
    )
    ap.add_argument(
        "--hidden-examples",
        type=int,
        default=1,
        help="worked episodes in the hidden-schema prompt (create: 1 to 3)",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    extra = argv[cut + 1 :]  # more skyrl train flags, after --

    from trainers.loop import train

    flags = recipe.read_flags(args.flags) + (SMOKE if args.smoke else []) + extra
    if args.run_dir:
        flags += ["--run-dir", args.run_dir]
    cfg = recipe.train_config(flags)
    run_dir = Path(cfg.run.run_dir)
    if args.smoke:
        from skyrl_agent.models import tiny_random_model

        model, tok = tiny_random_model(hidden_size=32, num_layers=1)
        model.save_pretrained(run_dir / "tiny-model")
        tok.save_pretrained(run_dir / "tiny-model")
        cfg = cfg.replace(model=str(run_dir / "tiny-model"))
    t0 = time.perf_counter()
    cfg, eval_file = with_task(cfg, run_dir / "data", hidden=args.hidden, examples=args.hidden_examples)

    result = train(cfg)

    summary = json.loads((run_dir / "summary.json").read_text())
    shapes = per_shape(summary, eval_file)
    summary["per_shape"] = shapes
    summary["command_seconds"] = time.perf_counter() - t0
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    b, f = result.baseline, result.final
    if b is not None and f is not None:
        from trainers.evaluation import gain_in_se

        print(
            f"\nHeld-out success ({cfg.data.eval_samples} samples per question, temperature {cfg.rollout.sampling.temperature}):"
        )
        print(f"  before {b.success:.3f} +/- {b.success_se:.3f}   after {f.success:.3f} +/- {f.success_se:.3f}   "
              f"gain {f.success - b.success:+.3f} ({gain_in_se(b, f):.1f} standard errors)")  # fmt: skip
        for shape in shapes.get("before", {}):
            print(
                f"  {shape:11s} {shapes['before'][shape]:.2f} -> {shapes.get('after', {}).get(shape, 0.0):.2f}"
            )
    print(f"\nrun directory {run_dir} ({summary['command_seconds']:.0f}s in all)")
    return summary


if __name__ == "__main__":
    main()
