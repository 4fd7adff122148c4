"""One decode step of the bundled model, eager against ``torch.compile``, over a static KV cache.

Issue #15's "lean decode" asks whether a static-shape decode step compiled with
``torch.compile`` wins on CPU. This times the model's forward for ``--rows`` rows, one new token
each, over transformers' ``StaticCache`` (``--cache-len`` slots, ``--prompt`` of them filled
first), in bf16 weights: the median step of eager, then of ``torch.compile(model.forward,
dynamic=False)`` (one compile per shape; its seconds are printed), and the ratio. Both run
the same cache and shapes, so the ratio is what compiling alone gives.

    python bench/bench_compile_decode.py --rows 1 32
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def decode_steps(
    model: Any, fwd: Callable[..., Any], rows: int, prompt: int, cache_len: int, steps: int
) -> list[float]:
    """Seconds of each of ``steps`` greedy decode steps after a ``prompt``-token prefill."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=cache_len)
    ids = torch.randint(3, 1000, (rows, prompt), generator=torch.Generator().manual_seed(0))
    times = []
    with torch.inference_mode():
        out = model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(prompt), use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        for i in range(steps):
            t = time.perf_counter()
            out = fwd(
                input_ids=nxt,
                past_key_values=cache,
                cache_position=torch.tensor([prompt + i]),
                use_cache=True,
            )
            nxt = out.logits[:, -1:].argmax(-1)
            times.append(time.perf_counter() - t)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--prompt", type=int, default=64, help="tokens prefilled before the decode steps")
    ap.add_argument("--cache-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from skyrl_agent.models import load_model_and_tokenizer

    torch.set_num_threads(args.threads)
    model, _ = load_model_and_tokenizer(args.model)
    model = model.to(torch.bfloat16).eval()
    print(f"{args.model} in bf16, {args.threads} threads, torch {torch.__version__}, cache {args.cache_len}")
    for rows in args.rows:
        decode_steps(model, model.forward, rows, args.prompt, args.cache_len, 4)  # warm-up
        eager = statistics.median(
            decode_steps(model, model.forward, rows, args.prompt, args.cache_len, args.steps)
        )
        compiled = torch.compile(model.forward, dynamic=False)
        t = time.perf_counter()
        first = decode_steps(model, compiled, rows, args.prompt, args.cache_len, 2)
        compile_s = time.perf_counter() - t
        steps = decode_steps(model, compiled, rows, args.prompt, args.cache_len, args.steps)
        comp = statistics.median(steps)
        print(
            f"rows {rows:>3}: eager {1000 * eager:7.1f} ms/step, compiled {1000 * comp:7.1f} ms/step "
            f"({eager / comp:.2f}x), compiling took {compile_s:.0f} s (first steps {max(first):.0f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
