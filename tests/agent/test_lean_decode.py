"""The CPU decode path: matmul attention for one-token steps, bf16 KV and the bf16 weight copy.

Each must give what the plain path gives (SDPA, the float32 module under autocast); the engine
must follow the trained weights through the copy."""

from __future__ import annotations

import asyncio
import types

import pytest
import torch
from transformers.cache_utils import DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from skyrl_agent.models import tiny_random_model
from skyrl_agent.policies._attention import ATTENTION, _decode_attention, use_fast_decode_attention
from skyrl_agent.policies._lean import LeanCopy, lean_copy_applies
from skyrl_agent.policies.hf import HFPolicy
from skyrl_agent.types import GenerateRequest, SamplingParams


@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
def test_decode_attention_matches_sdpa(mask_kind: str) -> None:
    g = torch.Generator().manual_seed(0)
    B, H, KV, L, D = 3, 6, 2, 17, 8
    q = torch.randn(B, H, 1, D, generator=g)
    k = torch.randn(B, KV, L, D, generator=g)
    v = torch.randn(B, KV, L, D, generator=g)
    keep = torch.ones(B, 1, 1, L, dtype=torch.bool)
    keep[0, ..., :5] = False
    keep[2, ..., 9:12] = False
    mask = {"none": None, "bool": keep, "additive": torch.zeros(B, 1, 1, L).masked_fill(~keep, -1e9)}[
        mask_kind
    ]
    module = types.SimpleNamespace(num_key_value_groups=H // KV, is_causal=True)
    ours, _ = _decode_attention(module, q, k, v, mask, scaling=0.3)
    ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.3)
    assert ours.shape == ref.shape == (B, 1, H, D)
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-5)


def test_decode_attention_in_bf16_is_as_exact_as_sdpa() -> None:
    """bf16 inputs under autocast: the float32 matmuls land as close to a float64 attention as
    SDPA's kernel (scores rounded to bf16, as in the first version, were 3x further off)."""
    g = torch.Generator().manual_seed(0)
    B, H, KV, L, D = 4, 6, 2, 300, 64
    q = (torch.randn(B, H, 1, D, generator=g) * 3).bfloat16()  # scores of a few units
    k = torch.randn(B, KV, L, D, generator=g).bfloat16()
    v = torch.randn(B, KV, L, D, generator=g).bfloat16()
    module = types.SimpleNamespace(num_key_value_groups=H // KV, is_causal=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, _ = _decode_attention(module, q, k, v, None)
        sdpa, _ = sdpa_attention_forward(module, q, k, v, None)
    kk, vv = k.double().repeat_interleave(H // KV, 1), v.double().repeat_interleave(H // KV, 1)
    exact = (torch.softmax(q.double() @ kk.transpose(-1, -2) / D**0.5, -1) @ vv).transpose(1, 2)
    err_ours = float((ours.double() - exact).abs().max())
    err_sdpa = float((sdpa.double() - exact).abs().max())
    assert ours.dtype == torch.bfloat16
    assert err_ours <= 1.2 * err_sdpa, (err_ours, err_sdpa)  # measured: equal (0.0070)


def _prefill_then_decode(
    model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, steps: int
) -> torch.Tensor:
    """Logits of ``steps`` one-token decode steps (teacher-forced from ``ids``) after a prefill."""
    P = ids.shape[1] - steps
    with torch.inference_mode():
        cache = DynamicCache()
        model(ids[:, :P], attention_mask=attn[:, :P], past_key_values=cache, use_cache=True)
        out = [
            model(
                ids[:, P + i : P + i + 1],
                attention_mask=attn[:, : P + i + 1],
                past_key_values=cache,
                use_cache=True,
            ).logits
            for i in range(steps)
        ]
    return torch.cat(out, 1)


def test_fast_attention_model_matches_sdpa_and_leaves_prefill_alone() -> None:
    model, _ = tiny_random_model()  # 4 query heads over 2 key/value heads
    ids = torch.randint(5, 1000, (3, 24), generator=torch.Generator().manual_seed(1))
    attn = torch.ones_like(ids)
    attn[0, :6] = 0  # left padding
    with torch.inference_mode():
        full_sdpa = model(ids, attention_mask=attn).logits
    steps_sdpa = _prefill_then_decode(model, ids, attn, 5)
    assert use_fast_decode_attention(model)
    assert model.config._attn_implementation == ATTENTION
    with torch.inference_mode():
        full_fast = model(ids, attention_mask=attn).logits
    steps_fast = _prefill_then_decode(model, ids, attn, 5)
    assert torch.equal(full_fast, full_sdpa)  # more than one query token: SDPA itself runs
    torch.testing.assert_close(steps_fast, steps_sdpa, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(steps_fast[1:], full_sdpa[1:, -5:], atol=1e-4, rtol=1e-4)


def test_fast_attention_leaves_other_implementations_alone() -> None:
    model, _ = tiny_random_model()
    model.set_attn_implementation("eager")
    assert not use_fast_decode_attention(model)
    assert model.config._attn_implementation == "eager"


def test_lean_copy_is_bit_exact_under_autocast_and_follows_refresh() -> None:
    model, _ = tiny_random_model()
    lean = LeanCopy(model)
    linears = [m for m in lean.module.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.dtype == torch.bfloat16 for m in linears)
    assert lean.module.get_input_embeddings().weight.dtype == torch.float32
    ids = torch.randint(5, 1000, (2, 16), generator=torch.Generator().manual_seed(2))

    def logits(m: torch.nn.Module) -> torch.Tensor:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            return m(ids).logits.float()

    assert torch.equal(logits(lean.module), logits(model))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    before = logits(lean.module)
    assert not torch.equal(before, logits(model))  # the copy does not see changes by itself
    lean.refresh()
    assert torch.equal(logits(lean.module), logits(model))


def test_lean_copy_applies_only_to_cpu_float32_under_autocast() -> None:
    model, _ = tiny_random_model()
    assert lean_copy_applies(model, autocast_bf16=True)
    assert not lean_copy_applies(model, autocast_bf16=False)
    assert not lean_copy_applies(model.to(torch.bfloat16), autocast_bf16=True)


def _greedy(policy: HFPolicy, prompts: list[list[int]]) -> list[list[float]]:
    params = SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=())
    outs = asyncio.run(policy.generate([GenerateRequest(p, params) for p in prompts]))
    return [o.logprobs for o in outs]


def test_engine_with_bf16_copy_matches_plain_autocast_and_sees_optimizer_steps() -> None:
    model, tok = tiny_random_model()
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(5, 1000, (n,), generator=g).tolist() for n in (9, 14, 20)]
    lean = HFPolicy(model, tok, autocast_bf16=True)
    assert lean.engine._lean is not None
    plain = HFPolicy(model, tok, autocast_bf16=True, bf16_weight_copy=False)
    try:
        before = _greedy(lean, prompts)
        assert before == _greedy(plain, prompts)
        # one real fused AdamW step on the master weights
        model.requires_grad_(True)
        opt = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
        ids = torch.tensor([prompts[2]])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = (
                -torch.log_softmax(model(ids).logits.float(), -1)[0, :-1].gather(-1, ids[0, 1:, None]).mean()
            )
        loss.backward()
        opt.step()
        model.requires_grad_(False)
        after_lean, after_plain = _greedy(lean, prompts), _greedy(plain, prompts)
        assert after_lean == after_plain
        assert after_lean != before  # the step reached the copy
        assert lean.engine.stats().lean_refreshes == 2
    finally:
        lean.close()
        plain.close()


def test_engine_with_matmul_attention_matches_sdpa_engine() -> None:
    """The opt-in path (full-width decode over the whole buffers) samples what SDPA samples."""
    model, tok = tiny_random_model()
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(5, 1000, (n,), generator=g).tolist() for n in (7, 15, 26, 3)]
    plain = HFPolicy(model, tok)
    try:
        ref = _greedy(plain, prompts)
    finally:
        plain.close()
    fast = HFPolicy(model, tok, fast_decode_attention=True)
    try:
        assert fast.engine.runner._full_width_decode
        got = _greedy(fast, prompts)
    finally:
        fast.close()
    assert [len(r) for r in got] == [len(r) for r in ref]
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-4, rtol=1e-4)
