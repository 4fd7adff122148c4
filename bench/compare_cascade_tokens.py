"""How much cascade decode attention changes what the engine samples, next to how much the batch size does.

Decodes the main job's calculator prompts greedily with the bundled model under bf16 autocast
three ways: cascade on (32 rows a batch), off (32 rows) and off (8 rows). For the pairs
on/off and 32/8 rows it prints how many generations are identical, where they first differ
and the logprob differences over the tokens both share. bf16 sums round differently with the
batch's shape, so the second pair is the noise floor the first is measured against.

    python bench/compare_cascade_tokens.py [--prompts 64] [--max-tokens 48]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from bench_generation import calculator_prompts  # noqa: E402

from skyrl_agent.models import BUNDLED_MODEL, load_model_and_tokenizer  # noqa: E402
from skyrl_agent.policies.hf import EngineConfig, HFPolicy  # noqa: E402
from skyrl_agent.types import GenerateOutput, GenerateRequest, SamplingParams  # noqa: E402


def _decode(
    model: Any, tok: Any, prompts: list[list[int]], params: SamplingParams, **engine: Any
) -> tuple[list[GenerateOutput], int]:
    """The generations and how many decoded rows read a shared prefix (cascade)."""
    policy = HFPolicy(model, tok, autocast_bf16=True, engine=EngineConfig(**engine))
    try:
        outs = policy.generate_sync([GenerateRequest(p, params) for p in prompts])
        return outs, policy.engine_stats().cascade_rows_decoded
    finally:
        policy.close()


def compare(a: list[GenerateOutput], b: list[GenerateOutput]) -> str:
    """One line: identical generations, median first difference, logprob gaps over shared tokens."""
    same, first, gaps = 0, [], []
    for x, y in zip(a, b, strict=True):
        same += x.token_ids == y.token_ids
        n = 0
        while n < min(len(x.token_ids), len(y.token_ids)) and x.token_ids[n] == y.token_ids[n]:
            n += 1
        first.append(n)
        gaps += [abs(p - q) for p, q in zip(x.logprobs[:n], y.logprobs[:n], strict=True)]
    gaps.sort()
    first.sort()
    return (
        f"identical {same}/{len(a)}; median first difference at token {first[len(first) // 2]}; "
        f"logprob gap over {len(gaps)} shared tokens: median {gaps[len(gaps) // 2]:.1e}, "
        f"99th percentile {gaps[int(len(gaps) * 0.99)]:.2e}, largest {gaps[-1]:.2e}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tok = load_model_and_tokenizer(BUNDLED_MODEL)
    prompts = calculator_prompts(tok, args.prompts)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, logprobs=True)
    on, cascaded = _decode(model, tok, prompts, params, max_rows=32, cascade_min_tokens=64)
    off, _ = _decode(model, tok, prompts, params, max_rows=32)
    off8, _ = _decode(model, tok, prompts, params, max_rows=8)
    if not cascaded:
        print("cascade did not apply (it needs a CPU with bf16 autocast); nothing to compare")
        return 1
    print(f"cascade on vs off (32 rows): {compare(on, off)}  ({cascaded} rows decoded with cascade)")
    print(f"32 vs 8 rows (cascade off):  {compare(off, off8)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
