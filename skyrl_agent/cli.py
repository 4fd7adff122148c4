"""``skyrl rollout``: play episodes of a registered env with a model and save the trajectories.
``skyrl eval``: the same, greedy by default, summarized as success rate, pass@k and env metrics.

::

    skyrl rollout --env text2sql --n 4 --concurrency 8 --out runs/sql.jsonl
    skyrl rollout --env my_env --prompts data.jsonl --model ./my-model --max-turns 4
    skyrl eval --env calculator --num-prompts 32 --n 4 --temperature 0.8 --success-threshold 0.8
    skyrl eval --env my_pkg.envs:MyEnv --prompts rows.parquet --model ./my-model
    skyrl rollout --import my_envs --env my_task --prompts rows.jsonl --out runs/mine.jsonl

``--env`` takes a registered id or your own env class as ``package.module:Class`` (importable
from the current directory); ``--import MODULE`` (repeatable) imports a module that registers
envs before the env is looked up (:mod:`skyrl_gym.user_envs`).

The model defaults to the bundled SmolLM2-135M-Instruct; prompts default to the env's
``example()``. The output format follows the extension (``.jsonl`` or ``.parquet``). A summary
table (reward, turns, tokens, failures) is printed at the end.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_rollout_command", "add_eval_command", "add_rollout_arguments", "run_rollout"]

_ENV_HELP = (
    "registered env id (see `skyrl envs`), or your own env class as package.module:Class "
    "(importable from the current directory)"
)


def add_rollout_command(subparsers: argparse._SubParsersAction) -> None:
    """Add ``skyrl rollout`` (the entry point declared in pyproject under ``skyrl.cli``)."""
    p = subparsers.add_parser(
        "rollout",
        help="play episodes of an env with a model and save trajectories",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_rollout_arguments(p)
    p.add_argument(
        "--env",
        help=f"{_ENV_HELP}: the env of rows that name none (their env_class wins)",
    )
    p.add_argument(
        "--prompts",
        help="tasks: a JSONL or Parquet file or a saved datasets directory with the published columns "
        "(default: the env's example())",
    )
    # moved to the adapter that owns Harbor tasks (the runtime imports no adapter)
    p.add_argument("--harbor", metavar="TASKS_DIR", help=argparse.SUPPRESS)
    p.set_defaults(handler=run_rollout)


def add_rollout_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``skyrl rollout`` other than where the prompts come from (``--env``,
    ``--prompts``): for verbs of other packages that make their own prompts and call
    :func:`run_rollout` (``skyrl harbor rollout``)."""
    p.add_argument("--out", required=True, help="output file: .jsonl or .parquet")
    _add_common(p, temperature=0.7)


def add_eval_command(subparsers: argparse._SubParsersAction) -> None:
    """Add ``skyrl eval``: success rate, pass@k and env metrics of a model on an env."""
    p = subparsers.add_parser(
        "eval",
        help="evaluate a model on an env: success rate, pass@k, env metrics",
        description="Play episodes (greedy by default) and print success rate, pass@k and the env's "
        "aggregated metrics. Masked episodes (infrastructure failures) are counted apart.",
    )
    p.add_argument("--out", default=None, help="also save the trajectories (.jsonl or .parquet)")
    p.add_argument(
        "--success-threshold", type=float, default=1.0, help="reward at or above which an episode succeeds"
    )
    p.add_argument("--k", type=int, nargs="+", default=None, help="pass@k values (default: 1 and --n)")
    p.add_argument("--env", required=True, help=_ENV_HELP)
    p.add_argument(
        "--prompts",
        help="tasks: a JSONL or Parquet file or a saved datasets directory (default: the env's example())",
    )
    _add_common(p, temperature=0.0)
    p.set_defaults(handler=_eval)


def _add_common(p: argparse.ArgumentParser, temperature: float) -> None:
    from skyrl_gym.cli import add_import_argument

    add_import_argument(p)
    p.add_argument(
        "--model", default="smollm2-135m", help="model directory, or 'smollm2-135m' (bundled, default)"
    )
    p.add_argument(
        "--num-prompts",
        type=int,
        default=None,
        help="use at most this many prompts (default: all, or 1 example)",
    )
    p.add_argument(
        "--env-config",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="settings for every env the run makes (a row's own env_config wins), e.g. db_path=/data",
    )
    p.add_argument("--n", type=int, default=1, help="samples per prompt (a GRPO group)")
    p.add_argument("--concurrency", type=int, default=8, help="episodes in flight at once")
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=128, help="most new tokens per turn")
    p.add_argument("--max-context", type=int, default=4096, help="most tokens per episode")
    p.add_argument("--deadline", type=float, default=600.0, help="seconds per episode")
    p.add_argument("--temperature", type=float, default=temperature)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--observation-style", choices=["messages", "inline"], default="messages")
    p.add_argument(
        "--template", default=None, help="chat template: a shipped name (chatml_tools...) or a .jinja file"
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-batch-size", type=int, default=16, help="rows in one model call")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--ray-workers", type=int, default=0, help="play on this many Ray workers (`ray` extra)")
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: a local one)")


def run_rollout(args: argparse.Namespace, items: list | None = None, overrides: dict | None = None) -> int:
    """``skyrl rollout``: play ``items`` (default: from ``--prompts`` or the env's example) with
    ``RolloutConfig`` fields ``overrides`` on top of the flags, save and summarise them."""
    out = _check_out(args.out)
    result = _play(args, items, overrides or {})
    _save(result.trajectories, out)
    print(result.stats.table())
    print(f"wrote {len(result.trajectories)} trajectories to {out}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from skyrl_agent.evaluation import summarize
    from skyrl_gym import spec

    out = _check_out(args.out) if args.out else None
    result = _play(args, None, {})
    ks = sorted(set(args.k or ([1, args.n] if args.n > 1 else [1])))
    env_cls = spec(args.env).load()
    summary = summarize(
        result.trajectories, args.success_threshold, ks, aggregate=getattr(env_cls, "aggregate_metrics", None)
    )
    print(summary.table())
    if out is not None:
        _save(result.trajectories, out)
        print(f"wrote {len(result.trajectories)} trajectories to {out}")
    return 0


def _check_out(path: str) -> Path:
    from skyrl_gym.errors import ConfigError

    out = Path(path)
    if out.suffix not in (".jsonl", ".parquet"):
        raise ConfigError(f"--out must end in .jsonl or .parquet, got {out.name!r}")
    return out


def _save(trajectories: list, out: Path) -> None:
    from skyrl_agent.io import save_jsonl, save_parquet

    (save_parquet if out.suffix == ".parquet" else save_jsonl)(trajectories, out)


def _play(args: argparse.Namespace, items: list | None = None, overrides: dict | None = None):  # noqa: ANN202 - a RolloutResult
    from skyrl_agent.chat import ChatRenderer
    from skyrl_agent.engine import RolloutEngine, prompts_from_example
    from skyrl_agent.tasks import check_env_ids, load_tasks, with_env_config
    from skyrl_agent.types import RolloutConfig, SamplingParams
    from skyrl_gym.config import parse_env_config
    from skyrl_gym.errors import ConfigError
    from skyrl_gym.user_envs import import_modules

    overrides = overrides or {}
    if getattr(args, "harbor", None):
        raise ConfigError(
            f"`skyrl rollout --harbor DIR` is now `skyrl harbor rollout {args.harbor}` (the same flags)"
        )
    import_modules(getattr(args, "imports", None) or ())
    if items is None:
        if args.prompts:
            items = load_tasks(args.prompts, default_env_id=args.env, limit=args.num_prompts)
        elif args.env:
            items = prompts_from_example(args.env, args.num_prompts or 1)
        else:
            raise ConfigError("give --env ENV_ID (see `skyrl envs`) or --prompts FILE")
    if not items:
        raise ConfigError("no prompts to play")
    check_env_ids(items)  # an unknown env fails here, before the model loads
    items = with_env_config(items, parse_env_config(getattr(args, "env_config", None) or ()))
    config = RolloutConfig(
        max_turns=args.max_turns,
        max_tokens_per_turn=args.max_tokens,
        max_context_tokens=args.max_context,
        episode_deadline_s=args.deadline,
        observation_style=args.observation_style,
        sampling=SamplingParams(temperature=args.temperature, top_p=args.top_p, stop=tuple(args.stop)),
        n_samples=args.n,
        concurrency=args.concurrency,
        seed=args.seed,
        **overrides,
    )
    template = args.template
    if template and template.endswith(".jinja"):
        template = Path(template).read_text(encoding="utf-8")
    if args.ray_workers:  # each worker loads its own copy of the model
        import functools

        from skyrl_agent.ray_engine import RayConfig, RayRolloutEngine

        ray_config = RayConfig(address=args.ray_address, num_workers=args.ray_workers)
        factory = functools.partial(_load_policy, args)
        with RayRolloutEngine(factory, config, ray_config, chat_template=template) as ray_engine:
            return ray_engine.run_sync(items)
    policy = _load_policy(args)
    renderer = ChatRenderer(policy.tokenizer, template)
    print(
        f"[rollout] env {', '.join(sorted({i.env_id for i in items}))}: {len(items)} prompt(s) x {args.n} "
        f"sample(s), model {args.model}",
        file=sys.stderr,
    )
    engine = RolloutEngine(policy, config, renderer=renderer, progress=False if args.quiet else None)
    try:
        return engine.run_sync(items)
    finally:
        close = getattr(policy, "close", None)
        if close is not None:
            close()


def _load_policy(args: argparse.Namespace):  # noqa: ANN202 - returns an HFPolicy (imports torch)
    import torch

    from skyrl_agent.policies.hf import HFPolicy

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.model == "tiny-random":  # a random 2-layer model with the SmolLM2 tokenizer: smoke tests
        from skyrl_agent.models import tiny_random_model

        model, tok = tiny_random_model()
        return HFPolicy(model, tok, max_batch_size=args.max_batch_size, seed=args.seed)
    return HFPolicy.from_pretrained(
        args.model, dtype=args.dtype, device=args.device, max_batch_size=args.max_batch_size, seed=args.seed
    )
