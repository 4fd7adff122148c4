"""The main job's train step: packed attention blocks and micro-batch bounds, paired in one run.

Builds a batch shaped like a main-job step (``skyrl train`` defaults: 4 calculator prompts x 8
samples; each sample's completion 60-140 tokens with a 15-token tool response inside it masked
out of the loss, random rewards) with the bundled model, and times
:func:`trainers.step.train_step` (forward, fused-head logprobs, loss, backward, fused AdamW) for
each variant, interleaved over ``--repeats`` rounds after a warm-up, from the same weights:

* ``per-segment``: each packed suffix its own attention call (``trainers._packed.BLOCK_TOKENS = 0``)
  in micro-batches of 8 rows, the behaviour before 2026-12-04; the baseline of the ratios;
* ``blocks``: consecutive suffixes up to ``BLOCK_TOKENS`` tokens in one call, 8-row micro-batches;
* ``blocks-mb32``: blocks in micro-batches of up to 32 rows and 8,192 computed tokens (here the
  whole step is one), the default from 2026-12-04 to 2026-12-05;
* ``default``: ``TrainConfig``'s defaults and, on CPU, the prefix attended apart from each
  suffix's own columns (``trainers._packed.SPLIT_PREFIX``).

Ratios are against ``blocks-mb32``. ``--attention`` times instead one layer's packed attention,
forward and backward, on the batch's shapes: the masked blocks against the split path (minimum
of ``--repeats`` rounds of 5 calls each, interleaved).

    python bench/bench_train_step.py [--repeats 3] [--threads 2] [--variants default ...] [--attention]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from bench_generation import calculator_prompts  # noqa: E402

import trainers._packed as packed  # noqa: E402
from skyrl_agent.models import BUNDLED_MODEL, load_model_and_tokenizer  # noqa: E402
from skyrl_agent.types import StopReason, Trajectory  # noqa: E402
from trainers.advantages import compute_advantages  # noqa: E402
from trainers.batch import collate  # noqa: E402
from trainers.config import TrainConfig  # noqa: E402
from trainers.step import train_step  # noqa: E402


def main_job_batch(tok: Any, prompts: int = 4, group: int = 8, seed: int = 0) -> list[Trajectory]:
    """``prompts`` x ``group`` trajectories over real calculator prompts with random completions."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for p, prompt in enumerate(calculator_prompts(tok, prompts, split="train", with_tools=True)):
        for i in range(group):
            n = int(torch.randint(60, 141, (1,), generator=g))
            response = torch.randint(100, 40000, (n,), generator=g).tolist()
            mask = [1] * n
            mask[n // 2 : n // 2 + 15] = [0] * 15  # the tool's response
            out.append(
                Trajectory(
                    prompt_ids=list(prompt),
                    response_ids=response,
                    loss_mask=mask,
                    rollout_logprobs=None,
                    token_rewards=[0.0] * n,
                    reward=float(torch.randint(0, 2, (1,), generator=g)),
                    stop_reason=StopReason.ENV_DONE,
                    group_id=p,
                    sample_index=i,
                )
            )
    return out


def attention_layer(model: Any, batch: Any, repeats: int) -> None:
    """One layer's packed attention (forward and backward) on ``batch``'s prefix and suffixes:
    the masked blocks against the split path, with random queries, keys and values shaped as the
    model's (float32 queries and keys after the rotary embedding, bf16 values; bf16 autocast)."""
    from trainers.logprobs import shared_prefix_len

    cfg = model.config
    H, KV = cfg.num_attention_heads, cfg.num_key_value_heads
    D = cfg.hidden_size // H
    P = shared_prefix_len(batch.input_ids_BT, batch.mask_BT)
    lengths = (batch.attention_mask_BT[:, P:] != 0).sum(dim=1).tolist()
    S = sum(lengths)
    segments = packed.Segments.of(P, lengths, torch.device("cpu"))
    module = model.model.layers[0].self_attn
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, H, S, D, generator=g, requires_grad=True)
    k = torch.randn(1, KV, P + S, D, generator=g, requires_grad=True)
    v = torch.randn(1, KV, P + S, D, generator=g).bfloat16().requires_grad_()
    grad = torch.randn(1, S, H, D, generator=g).bfloat16()
    print(
        f"one layer's attention: {S} packed tokens in {len(lengths)} suffixes over a {P}-token prefix, "
        f"{H} query and {KV} key/value heads; own batches {[tuple(b.index_NM.shape) for b in segments.own]}"
    )
    best: dict[str, float] = {}
    for _ in range(repeats + 1):  # the first round warms up
        for name, split in (("blocks", False), ("split", True)):
            packed.SPLIT_PREFIX = split
            start = time.perf_counter()
            for _ in range(5):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out, _ = packed._packed_attention(
                        module, q, k, v, None, 0.0, module.scaling, **{packed.SEGMENTS: segments}
                    )
                out.backward(grad)
            best[name] = min(best.get(name, float("inf")), (time.perf_counter() - start) / 5)
    for name, t in best.items():
        print(f"  {name:<7} {t * 1e3:7.1f} ms forward and backward  {best['blocks'] / t:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=None, help="a subset (blocks-mb32 always runs)")
    ap.add_argument("--attention", action="store_true", help="time one layer's attention instead")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model_and_tokenizer(BUNDLED_MODEL)
    batch = collate(main_job_batch(tok), pad_id=tok.pad_token_id)
    base_cfg = TrainConfig(bf16=True)
    adv = compute_advantages(
        base_cfg.advantage, batch.mask_BT, rewards_B=batch.rewards_B, group_ids_B=batch.group_ids_B
    )
    batch.advantages_BT = adv.advantages_BT
    if args.attention:
        attention_layer(model, batch, args.repeats)
        return
    print(
        f"batch: {batch.input_ids_BT.shape[0]} rows x {batch.input_ids_BT.shape[1]} tokens, "
        f"{int(batch.attention_mask_BT.sum())} attended, {int(batch.mask_BT.sum())} trained; "
        f"{args.threads} threads, bf16 autocast, torch {torch.__version__}"
    )
    block, mbs, mbt = packed.BLOCK_TOKENS, base_cfg.micro_batch_size, base_cfg.micro_batch_tokens
    variants = {  # block tokens, micro_batch_size, micro_batch_tokens, split prefix
        "per-segment": (0, 8, 0, False),
        "blocks": (block, 8, 0, False),
        "blocks-mb32": (block, mbs, mbt, False),
        "default": (block, mbs, mbt, True),
    }
    if args.variants:
        unknown = set(args.variants) - set(variants)
        if unknown:
            ap.error(f"unknown variants {sorted(unknown)}; choose from {sorted(variants)}")
        variants = {k: v for k, v in variants.items() if k in args.variants or k == "blocks-mb32"}
    state = copy.deepcopy(model.state_dict())
    times: dict[str, list[float]] = {name: [] for name in variants}
    for rnd in range(args.repeats + 1):  # round 0 warms up
        for name, (block_tokens, mbs, mbt, split) in variants.items():
            model.load_state_dict(state)
            packed.BLOCK_TOKENS, packed.SPLIT_PREFIX = block_tokens, split
            cfg = TrainConfig(bf16=True, micro_batch_size=mbs, micro_batch_tokens=mbt)
            opt = torch.optim.AdamW(model.parameters(), lr=cfg.optimizer.lr, fused=True)
            start = time.perf_counter()
            train_step(model, opt, batch, cfg)
            if rnd > 0:
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["blocks-mb32"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<12} median {med:6.2f} s  ({', '.join(f'{t:.2f}' for t in ts)})  {base / med:.2f}x")


if __name__ == "__main__":
    main()
