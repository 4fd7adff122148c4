"""``skyrl serve``: an OpenAI-compatible server in front of a local model that records token ids
and logprobs per session.

::

    skyrl serve                                  # the bundled SmolLM2-135M-Instruct on 127.0.0.1:8000
    skyrl serve --model ./my-model --host 0.0.0.0 --port 8001
    skyrl serve --tiny --port 0                  # a tiny random model (tests); port 0 picks one

Endpoints: ``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``, ``/v1/sessions``,
``GET``/``DELETE /v1/sessions/{id}``. Name a session with the ``X-Session-ID`` header or the
``user`` field.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_command", "add_server_arguments", "build_server", "main"]


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Add ``skyrl serve`` (the entry point declared in pyproject under ``skyrl.cli``)."""
    p = subparsers.add_parser(
        "serve",
        help="serve a model behind an OpenAI-compatible API that records token ids per session",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_server_arguments(p)
    p.set_defaults(handler=_serve)


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """``skyrl serve``'s flags (the model, the context, limits, the listening address) on ``p``;
    :func:`build_server` reads them."""
    p.add_argument(
        "--model",
        default="smollm2-135m",
        help="model directory, 'smollm2-135m' (bundled, default) or 'tiny-random'",
    )
    p.add_argument("--tiny", action="store_true", help="a tiny random model with the SmolLM2 tokenizer")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed at startup)")
    p.add_argument("--served-model-name", default=None, help="name clients use (default: from --model)")
    p.add_argument(
        "--template", default=None, help="chat template: a shipped name (chatml_tools...) or a .jinja file"
    )
    p.add_argument("--max-model-len", type=int, default=None, help="context length (default: the model's)")
    p.add_argument("--max-tokens", type=int, default=512, help="new tokens when a request sets none")
    p.add_argument("--max-batch-size", type=int, default=16, help="rows in one model call")
    p.add_argument(
        "--max-request-bytes", type=int, default=16 * 2**20, help="largest request body (else 413)"
    )
    p.add_argument(
        "--max-prompt-chars",
        type=int,
        default=None,
        help="most prompt characters before tokenizing (default: 64 per token of context)",
    )
    p.add_argument(
        "--request-timeout", type=float, default=600.0, help="deadline of one generation, seconds (else 504)"
    )
    p.add_argument(
        "--api-key", default=None, help="require this bearer token (default: $SKYRL_SERVE_API_KEY, else none)"
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])


def build_server(args: argparse.Namespace) -> tuple[Any, Any]:
    """The policy and :class:`~skyrl_agent.server.types.ServerConfig` that the flags of
    :func:`add_server_arguments` name (the caller closes the policy)."""
    import torch

    from skyrl_agent.models import BUNDLED_MODEL, tiny_random_model
    from skyrl_agent.policies.hf import HFPolicy
    from skyrl_agent.server.types import ServerConfig
    from skyrl_gym.errors import require

    require("fastapi", "serve", "skyrl serve")
    require("uvicorn", "serve", "skyrl serve")
    if args.threads:
        torch.set_num_threads(args.threads)
    tiny = args.tiny or args.model == "tiny-random"
    if tiny:
        model, tok = tiny_random_model()
        policy = HFPolicy(model, tok, max_batch_size=args.max_batch_size, seed=args.seed)
        name = "tiny-random"
    else:
        policy = HFPolicy.from_pretrained(
            args.model,
            dtype=args.dtype,
            device=args.device,
            max_batch_size=args.max_batch_size,
            seed=args.seed,
        )
        name = BUNDLED_MODEL if args.model in (BUNDLED_MODEL, "bundled") else Path(args.model).name
    template = args.template
    if template and template.endswith(".jinja"):
        template = Path(template).read_text(encoding="utf-8")
    context = args.max_model_len or int(getattr(policy.model.config, "max_position_embeddings", 0) or 4096)
    config = ServerConfig(
        model_name=args.served_model_name or name,
        chat_template=template,
        max_model_len=context,
        default_max_tokens=args.max_tokens,
        max_request_bytes=args.max_request_bytes,
        max_prompt_chars=args.max_prompt_chars,
        request_timeout_s=args.request_timeout,
        api_key=args.api_key or os.environ.get("SKYRL_SERVE_API_KEY") or None,
    )
    return policy, config


def _serve(args: argparse.Namespace) -> int:
    from skyrl_agent.server.runner import run_server

    policy, config = build_server(args)
    try:
        run_server(policy, config, host=args.host, port=args.port, log_level=args.log_level)
    finally:
        policy.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m skyrl_agent.server`` (the same as ``skyrl serve``)."""
    parser = argparse.ArgumentParser(
        prog="skyrl serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_server_arguments(parser)
    return _serve(parser.parse_args(argv))
