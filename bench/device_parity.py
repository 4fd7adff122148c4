"""Whether sampling and training compute the same numbers on a device as on the CPU.

Written for #16 item 6 (the main job ended at 0.70 held-out success on an H200 against 0.92 on
CPU): a wrong number on one device would show here, a different random stream would not. With
the bundled model and the main job's calculator prompts under bf16 autocast it

1. samples ``--prompts`` generations on ``--device`` with the engine (temperature 0.8),
2. recomputes the sampled tokens' logprobs with the trainer's forward
   (:func:`trainers.logprobs.forward_logprobs`) on ``--device`` and, as the reference, on the CPU
   in float32 without autocast,
3. takes the gradient of a policy-gradient surrogate (fixed +-1 advantages per row) on both and
   compares them (cosine similarity, relative norm difference).

It prints the gaps: sampler vs trainer on the device (what the trainer's TIS correction sees),
device trainer vs CPU float32 (what bf16 and the device's kernels change). Run it on the CPU as
well to read the second gap against bf16 on the CPU alone:

    python bench/device_parity.py --device cuda [--prompts 32] [--max-tokens 48]
    python bench/device_parity.py --device cpu
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from bench_generation import calculator_prompts  # noqa: E402

from skyrl_agent.models import BUNDLED_MODEL, load_model_and_tokenizer  # noqa: E402
from skyrl_agent.policies.hf import EngineConfig, HFPolicy  # noqa: E402
from skyrl_agent.types import GenerateRequest, SamplingParams  # noqa: E402
from trainers.logprobs import forward_logprobs  # noqa: E402


def _batch(prompts: list[list[int]], outs: list[Any], pad: int) -> tuple[torch.Tensor, ...]:
    """Right-padded ids, attention mask, mask of sampled tokens, and the sampler's logprobs."""
    rows = [p + o.token_ids for p, o in zip(prompts, outs, strict=True)]
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), pad, dtype=torch.long)
    attn = torch.zeros(len(rows), T, dtype=torch.long)
    mask = torch.zeros(len(rows), T)
    sampler = torch.zeros(len(rows), T)
    for i, (p, o) in enumerate(zip(prompts, outs, strict=True)):
        n = len(p) + len(o.token_ids)
        ids[i, :n] = torch.tensor(p + o.token_ids)
        attn[i, :n] = 1
        mask[i, len(p) : n] = 1
        sampler[i, len(p) : n] = torch.tensor(o.logprobs, dtype=torch.float32)
    return ids, attn, mask, sampler


def _logprobs_and_grad(
    model: Any, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor, bf16: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token logprobs [B, T] and the flattened gradient of ``-(adv * logprob)`` (CPU, float32)."""
    dev = next(model.parameters()).device
    model.zero_grad(set_to_none=True)
    out = forward_logprobs(model, ids.to(dev), attn.to(dev), mask_BT=mask.to(dev), bf16=bf16)
    adv_B1 = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(ids.shape[0])], device=dev)[:, None]
    m = mask.to(dev)
    loss = -(adv_B1 * out.logprobs_BT * m).sum() / m.sum()
    loss.backward()
    grad = torch.cat(
        [p.grad.detach().float().flatten().cpu() for p in model.parameters() if p.grad is not None]
    )
    return out.logprobs_BT.detach().float().cpu(), grad


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a64, b64 = a.double(), b.double()  # float32 sums over 135M entries drift past 1
    return float(a64 @ b64 / (a64.norm() * b64.norm()))


def _gap(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> str:
    d = (a - b).abs()[mask.bool()]
    return f"mean {d.mean():.2e}  p99 {d.quantile(0.99):.2e}  max {d.max():.2e}  (n={d.numel()})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    model, tok = load_model_and_tokenizer(BUNDLED_MODEL, device=args.device)
    ref, _ = load_model_and_tokenizer(BUNDLED_MODEL, device="cpu")
    prompts = calculator_prompts(tok, args.prompts)
    params = SamplingParams(temperature=0.8, max_tokens=args.max_tokens, seed=None)
    policy = HFPolicy(
        model, tok, autocast_bf16=True, seed=args.seed, engine=EngineConfig(max_rows=args.prompts)
    )
    try:
        outs = policy.generate_sync([GenerateRequest(p, params) for p in prompts])
    finally:
        policy.close()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids, attn, mask, sampler = _batch(prompts, outs, pad)
    model.train()
    ref.train()
    dev_lp, dev_grad = _logprobs_and_grad(model, ids, attn, mask, bf16=True)
    ref_lp, ref_grad = _logprobs_and_grad(ref, ids, attn, mask, bf16=False)
    cpu_bf16_lp, cpu_bf16_grad = _logprobs_and_grad(ref, ids, attn, mask, bf16=True)
    cos, cos_cpu = _cosine(dev_grad, ref_grad), _cosine(cpu_bf16_grad, ref_grad)
    print(
        f"device {args.device} ({torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}), "
        f"torch {torch.__version__}, {args.prompts} prompts, {int(mask.sum())} sampled tokens"
    )
    print(f"sampler ({args.device}, bf16) vs trainer ({args.device}, bf16):   {_gap(sampler, dev_lp, mask)}")
    print(f"trainer ({args.device}, bf16) vs trainer (cpu, float32):          {_gap(dev_lp, ref_lp, mask)}")
    if args.device != "cpu":  # on the CPU the line above is this one
        print(f"trainer (cpu, bf16) vs trainer (cpu, float32):             {_gap(cpu_bf16_lp, ref_lp, mask)}")
    print(f"sampler ({args.device}, bf16) vs trainer (cpu, float32):          {_gap(sampler, ref_lp, mask)}")
    print(
        f"gradient cosine, {args.device} bf16 vs cpu float32: {cos:.5f}  "
        f"(relative norm gap {(dev_grad - ref_grad).norm() / ref_grad.norm():.3e})"
    )
    print(
        f"gradient cosine, cpu bf16 vs cpu float32:   {cos_cpu:.5f}  "
        f"(relative norm gap {(cpu_bf16_grad - ref_grad).norm() / ref_grad.norm():.3e})"
    )
    print(f"mean sampled logprob {sampler[mask.bool()].mean():.4f}; {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
