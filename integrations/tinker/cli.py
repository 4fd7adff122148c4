"""``skyrl tinker serve``: a local server for the official ``tinker`` client.

::

    skyrl tinker serve                                   # 127.0.0.1:8000, checkpoints in ~/.cache/skyrl/tinker
    skyrl tinker serve --port 0 --checkpoint-dir ./ckpt  # port 0 picks a free one (printed)
    skyrl tinker serve --model Qwen/Qwen3-0.6B=/models/qwen3-0.6b --device cuda

Clients connect with ``tinker.ServiceClient(base_url="http://127.0.0.1:8000", api_key="tml-local")``
(any key starting with ``tml-``; the server checks it only when started with ``--api-key``). Base models: ``smollm2-135m``
(bundled), ``tiny-random`` (tests), a local model directory, or a name given with ``--model``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

__all__ = ["add_command", "main"]


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Add ``skyrl tinker serve`` (the entry point declared in pyproject under ``skyrl.cli``)."""
    p = subparsers.add_parser("tinker", help="a Tinker-compatible API server on local hardware")
    verbs = p.add_subparsers(dest="tinker_command", metavar="VERB")
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])
    serve = verbs.add_parser(
        "serve",
        help="serve the Tinker API (training, sampling, checkpoints) for the official tinker client",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(serve)
    serve.set_defaults(handler=_serve)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from integrations.tinker.types import TinkerServerConfig

    d = TinkerServerConfig.__dataclass_fields__
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed at startup)")
    p.add_argument(
        "--checkpoint-dir",
        default=None,
        help="where tinker:// checkpoints go (default ~/.cache/skyrl/tinker)",
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="serve base model NAME from PATH (repeatable)",
    )
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--lora-alpha", type=float, default=d["lora_alpha"].default)
    p.add_argument("--micro-batch-size", type=int, default=d["micro_batch_size"].default)
    p.add_argument(
        "--max-tokens",
        type=int,
        default=d["default_max_tokens"].default,
        help="new tokens when a request sets none",
    )
    p.add_argument(
        "--max-sample-tokens",
        type=int,
        default=d["max_sample_tokens"].default,
        help="most new tokens per sampled sequence (also capped by the model's context)",
    )
    p.add_argument(
        "--sample-timeout",
        type=float,
        default=d["sample_timeout_s"].default,
        metavar="SECONDS",
        help="longest one sampling request may run before it is stopped",
    )
    p.add_argument(
        "--no-durable",
        dest="durable",
        action="store_false",
        help="keep sessions and models in memory only (default: in CHECKPOINT_DIR/server.sqlite3, so a "
        "restarted server serves the same runs)",
    )
    p.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help="accept only this client key (repeatable; also $SKYRL_TINKER_API_KEYS, comma-separated); "
        "default: any key",
    )
    p.add_argument(
        "--no-jwt",
        dest="jwt",
        action="store_false",
        help="no JWT exchange: clients send their API key on every request (default: they trade it "
        "for a signed token at /api/v1/auth/token, as Tinker's clients do; RestClient.whoami needs it)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])


def _serve(args: argparse.Namespace) -> int:
    from integrations.tinker.server import run_server
    from integrations.tinker.types import TinkerServerConfig
    from skyrl_gym.errors import ConfigError, require

    for module in ("fastapi", "uvicorn", "tinker"):
        require(module, "tinker", "skyrl tinker serve")
    aliases = []
    for item in args.model:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--model takes NAME=PATH (e.g. Qwen/Qwen3-0.6B=/models/qwen3), got {item!r}")
        aliases.append((name, path))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    kwargs = {"checkpoint_dir": args.checkpoint_dir} if args.checkpoint_dir else {}
    config = TinkerServerConfig(
        model_aliases=tuple(aliases),
        device=args.device,
        dtype=args.dtype,
        lora_alpha=args.lora_alpha,
        micro_batch_size=args.micro_batch_size,
        default_max_tokens=args.max_tokens,
        max_sample_tokens=args.max_sample_tokens,
        sample_timeout_s=args.sample_timeout,
        durable=args.durable,
        jwt_auth=args.jwt,
        seed=args.seed,
        api_keys=tuple(args.api_key)
        + tuple(k for k in os.environ.get("SKYRL_TINKER_API_KEYS", "").split(",") if k.strip()),
        **kwargs,
    )
    run_server(config, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m integrations.tinker`` (the same as ``skyrl tinker serve``)."""
    parser = argparse.ArgumentParser(
        prog="skyrl tinker serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _add_arguments(parser)
    return _serve(parser.parse_args(argv))
