"""One decode step of the bundled model under bf16 autocast on CPU: what each part of the lean
decode path saves, against the path the engine took before, measured in the same run.

A step is one forward of ``rows`` rows, one new token each, over ``context`` cached tokens (by
default 32 rows over 400 tokens: the main job's evaluation). The variants, each adding one change:

- ``before``: SDPA attention, the float32 module (autocast casts every weight at every step),
  float32 KV sliced to the used columns (attention casts all of it to bf16 every step);
- ``bf16 KV``: the cache kept in bf16;
- ``matmul attention``: one-token steps as two matmuls (``skyrl_agent.policies._attention``);
- ``full width``: attention reads the whole, contiguous buffer (masked), no per-layer copies;
- ``bf16 weights``: the engine's bf16 copy of the linear weights (``skyrl_agent.policies._lean``);
- ``default``: what ``HFPolicy`` does by default under bf16 autocast on CPU: bf16 KV and the bf16
  weight copy with SDPA attention (the matmul attention is opt-in, ``fast_decode_attention``).

Variants are interleaved, ``--repeats`` rounds of ``--steps`` steps; the minimum and median
per-step times are printed, with each variant's speed-up over ``before``.

    python bench/bench_attention.py [--rows 32] [--context 400]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from skyrl_agent.models import BUNDLED_MODEL, load_model_and_tokenizer
from skyrl_agent.policies._attention import use_fast_decode_attention
from skyrl_agent.policies._lean import LeanCopy


def _cache(K: list[torch.Tensor], V: list[torch.Tensor], t: int, sliced: bool) -> Any:
    """A transformers cache over fixed buffers: writes column ``t``, returns ``:t+1`` or all."""
    from transformers.cache_utils import Cache, CacheLayerMixin

    class Layer(CacheLayerMixin):
        is_sliding = False

        def __init__(self, i: int) -> None:
            super().__init__()
            self.i, self.is_initialized = i, True

        def lazy_initialization(self, *args: Any, **kwargs: Any) -> None:
            pass

        def update(self, k: torch.Tensor, v: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            K[self.i][:, :, t : t + 1] = k
            V[self.i][:, :, t : t + 1] = v
            if sliced:
                return K[self.i][:, :, : t + 1], V[self.i][:, :, : t + 1]
            return K[self.i], V[self.i]

        def get_seq_length(self) -> int:
            return t

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return (t + 1 if sliced else K[self.i].shape[2]), 0

        def get_max_length(self) -> int:
            return -1

    return Cache(layers=[Layer(i) for i in range(len(K))])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(BUNDLED_MODEL))
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--context", type=int, default=400)
    ap.add_argument(
        "--capacity", type=int, default=512, help="buffer columns (the engine grows them in steps)"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, _ = load_model_and_tokenizer(args.model)
    model.requires_grad_(False)
    cfg = model.config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    B, t, cap = args.rows, args.context, max(args.capacity, args.context + 1)
    g = torch.Generator().manual_seed(0)
    shape = (B, kv_heads, cap, head_dim)
    K16 = [torch.randn(shape, generator=g).to(torch.bfloat16) for _ in range(cfg.num_hidden_layers)]
    V16 = [torch.randn(shape, generator=g).to(torch.bfloat16) for _ in range(cfg.num_hidden_layers)]
    K32, V32 = [k.float() for k in K16], [v.float() for v in V16]
    keep = torch.zeros(B, 1, 1, cap, dtype=torch.bool)
    keep[..., : t + 1] = True
    tokens = torch.randint(100, 40000, (B, 1), generator=g)
    pos = torch.full((B, 1), t)
    fast = LeanCopy(model)  # built while the master still uses SDPA; switched below
    use_fast_decode_attention(fast.module)

    def step(m: Any, K: list[torch.Tensor], V: list[torch.Tensor], sliced: bool) -> None:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            m(
                input_ids=tokens,
                position_ids=pos,
                attention_mask=keep[..., : t + 1] if sliced else keep,
                past_key_values=_cache(K, V, t, sliced),
                use_cache=True,
            )

    variants: list[tuple[str, str, Any, Any, Any, bool]] = [
        ("before", "sdpa", model, K32, V32, True),
        ("bf16 KV", "sdpa", model, K16, V16, True),
        ("+ matmul attention", "fast", model, K16, V16, True),
        ("+ full width", "fast", model, K16, V16, False),
        ("+ bf16 weights", "fast", fast.module, K16, V16, False),
        ("default: bf16 KV+weights", "sdpa", fast.module, K16, V16, True),
    ]
    print(
        f"model {cfg.model_type} {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M, {args.threads} threads, "
        f"torch {torch.__version__}; {B} rows x 1 new token over {t} cached (buffers of {cap} columns)"
    )
    times: dict[str, list[float]] = {name: [] for name, *_ in variants}
    for _ in range(args.repeats):
        for name, attn, m, K, V, sliced in variants:
            if attn == "sdpa":
                m.set_attn_implementation("sdpa")
            else:
                use_fast_decode_attention(m)
            step(m, K, V, sliced)  # warm
            start = time.perf_counter()
            for _ in range(args.steps):
                step(m, K, V, sliced)
            times[name].append((time.perf_counter() - start) / args.steps)
    base = min(times["before"])
    for name, ts in times.items():
        print(
            f"  {name:<26} min {min(ts) * 1e3:7.1f} ms  median {statistics.median(ts) * 1e3:7.1f} ms"
            f"   before / this (min) {base / min(ts):.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
