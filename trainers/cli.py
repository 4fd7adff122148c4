"""``skyrl train``: every :class:`~trainers.config.TrainConfig` setting is a flag.

Also runnable as ``python -m trainers.cli train ...``, which is what ``torchrun`` launches for
data-parallel training: ``torchrun --nproc_per_node 2 -m trainers.cli train --model ...``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from skyrl_gym.config import add_setting_argument

__all__ = ["add_command", "main"]  # the verbs: train, export


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``train`` and ``export`` verbs."""
    from trainers.config import TrainConfig

    p = subparsers.add_parser(
        "train",
        help="train a policy with GRPO/PPO (default: SmolLM2-135M on the calculator task, CPU, about 10 min on 2 cores)",
        description=(
            "Train with the native GRPO/PPO trainer. With no flags: the bundled SmolLM2-135M-Instruct "
            "learns the two-turn calculator tool-use task on CPU, with held-out evaluation before and after."
        ),
    )
    from trainers.config import accepted_settings

    defaults = TrainConfig().as_settings()
    settings = accepted_settings()
    for name, s in settings.items():
        if name != "imports":
            add_setting_argument(p, name, s.hint, s.doc, defaults.get(name, "see --group-filter"))
    from skyrl_gym.cli import add_import_argument

    # the setting ``imports`` is one ``--import MODULE`` per module (the usual spelling of a repeated import)
    add_import_argument(p, help=f"{settings['imports'].doc} (repeatable; default: none)")
    p.add_argument(
        "--config",
        dest="config_files",
        action="append",
        default=[],
        metavar="FILE",
        help=(
            "Settings from a TOML, YAML or JSON file, by flag name, at the top level or in their "
            "part's table ([data], [model], [rollout], [algorithm], [optimizer], [sampler], [run]; "
            "other tables are headings; see trainers.config_file). Repeatable: later files win, flags given here win over files. "
            "With --resume the run directory's config.json comes first, so a resumed run needs no "
            "flags but --run-dir and --resume."
        ),
    )
    p.set_defaults(handler=_run)

    e = subparsers.add_parser(
        "export",
        help="write a run's checkpoint as a Hugging Face model directory (transformers, vLLM, skyrl serve)",
        description=(
            "Write the newest (or --step N) checkpoint of RUN_DIR to OUT as a save_pretrained directory "
            "with the tokenizer and chat template. LoRA runs: the merged model, the adapter in OUT/adapter."
        ),
    )
    e.add_argument("run_dir", help="the --run-dir of a skyrl train run")
    e.add_argument("out", help="directory to write (must be empty or absent, unless --overwrite)")
    e.add_argument("--step", type=int, default=None, help="the checkpoint after this step (default: newest)")
    e.add_argument(
        "--no-merge-lora", dest="merge_lora", action="store_false", help="LoRA runs: write the adapter only"
    )
    e.add_argument("--overwrite", action="store_true", help="replace OUT if it has files")
    e.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    from trainers.export import export_checkpoint

    out = export_checkpoint(
        args.run_dir, args.out, step=args.step, merge_lora=args.merge_lora, overwrite=args.overwrite
    )
    print(f"exported {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``skyrl train`` as its own program (for ``torchrun -m trainers.cli train ...``)."""
    from skyrl_gym.cli import main as skyrl_main

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "train":
        args = ["train", *args]
    return skyrl_main(args)


def _run(args: argparse.Namespace) -> int:
    from trainers.config import TrainConfig
    from trainers.config_file import config_of_args
    from trainers.loop import train

    cfg = config_of_args(TrainConfig, args)
    from trainers.allocator import reexec

    reexec(cfg.run.allocator)  # returns unless it starts this command again on jemalloc
    result = train(cfg)
    if not _is_main_rank():
        _exit_if_torchrun_worker()
        return 0
    print()
    print(f"run directory   {result.run_dir}")
    print(f"steps           {result.steps}  ({result.seconds:.0f} s in total)")
    for name, res in (("before", result.baseline), ("after", result.final)):
        if res is not None:
            print(
                f"held-out {name:6s} success {res.success:.3f} +/- {res.success_se:.3f} "
                f"(mean reward {res.reward_mean:.3f}, {res.episodes} episodes)"
            )
    if result.baseline is not None and result.final is not None:
        se = (result.baseline.success_se**2 + result.final.success_se**2) ** 0.5
        gain = result.final.success - result.baseline.success
        print(
            f"gain            {gain:+.3f} ({gain / se:.1f} standard errors)"
            if se > 0
            else f"gain {gain:+.3f}"
        )
    if result.plot is not None:
        print(f"plot            {result.plot}")
    _exit_if_torchrun_worker()
    return 0


def _is_main_rank() -> bool:
    import os

    return int(os.environ.get("RANK", "0")) == 0


def _exit_if_torchrun_worker() -> None:
    """Under ``torchrun`` a finished rank leaves through :func:`trainers.distributed.exit_rank`
    (see there why); a plain single-process run returns normally."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from trainers.distributed import exit_rank

        exit_rank(0)


if __name__ == "__main__":
    sys.exit(main())
