"""The written-out Llama decode step: bit for bit the model's forward, in the engine too, and
only for the models it reproduces."""

from __future__ import annotations

import contextlib

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import DynamicCache

from skyrl_agent.models import tiny_random_model
from skyrl_agent.policies._engine import EngineConfig
from skyrl_agent.policies._lean import LeanCopy
from skyrl_agent.policies._llama_step import LlamaDecodeStep
from skyrl_agent.policies.hf import HFPolicy
from skyrl_agent.types import GenerateRequest, SamplingParams


def _prefilled(model: torch.nn.Module, B: int, T: int) -> tuple[DynamicCache, torch.Tensor]:
    """A cache of ``B`` rows of ``T`` random tokens (row 1 left-padded by 3) and its mask."""
    ids = torch.randint(5, 500, (B, T), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, :3] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
    return cache, mask


@pytest.mark.parametrize("lean", [False, True], ids=["float32", "bf16-copy-under-autocast"])
def test_step_logits_equal_the_forward_bit_for_bit(lean: bool) -> None:
    model, _ = tiny_random_model(num_layers=3)
    run = LeanCopy(model).module if lean else model
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if lean else contextlib.nullcontext
    step = LlamaDecodeStep.build(run)
    assert step is not None
    B, T = 3, 11
    with torch.inference_mode(), ctx():
        ref_cache, mask = _prefilled(run, B, T)
        our_cache, _ = _prefilled(run, B, T)
        tokens = torch.tensor([[7], [300], [42]])
        pos = (mask.sum(-1, keepdim=True)).long()
        keep = torch.cat([mask, torch.ones(B, 1, dtype=torch.long)], 1).bool()[:, None, None, :]
        for _ in range(4):  # a few steps: the caches must stay equal too
            ref = run(
                input_ids=tokens, position_ids=pos, attention_mask=keep, cache=ref_cache, use_cache=True
            ).logits[:, -1, :]
            ours = step(tokens, pos, lambda i, k, v: our_cache.update(k, v, i), keep)
            assert ours.shape == (B, model.config.vocab_size)
            assert torch.equal(ours, ref)
            for a, b in zip(our_cache.layers, ref_cache.layers, strict=True):
                assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
            tokens, pos = ref.argmax(-1, keepdim=True), pos + 1
            keep = torch.cat([keep, torch.ones(B, 1, 1, 1, dtype=torch.bool)], -1)


def _outputs(model: torch.nn.Module, tok: object, lean_step: bool, bf16: bool) -> tuple[list, bool]:
    policy = HFPolicy(
        model,
        tok,
        autocast_bf16=bf16,
        engine=EngineConfig(max_rows=4, lean_decode_step=lean_step, cascade_min_tokens=16 if bf16 else 0),
    )
    try:
        system = list(range(40, 80))  # a shared prefix (cascade reads it once under bf16)
        reqs = [
            GenerateRequest(
                system + [100 + i] * (i + 1), SamplingParams(temperature=t, max_tokens=12, seed=i)
            )
            for i, t in enumerate([0.0, 0.8, 1.0, 0.8, 0.0, 1.2])  # six requests, four rows: joins
        ]
        outs = policy.generate_sync(reqs)
        used = policy.engine.runner._step is not None
    finally:
        policy.close()
    return [(o.token_ids, o.logprobs) for o in outs], used


@pytest.mark.parametrize("bf16", [False, True])
def test_engine_with_the_step_samples_exactly_what_it_did_without(bf16: bool) -> None:
    model, tok = tiny_random_model(num_layers=2)
    with_step, used = _outputs(model, tok, True, bf16)
    without, unused = _outputs(model, tok, False, bf16)
    assert used and not unused
    assert with_step == without
    assert all(len(ids) > 0 for ids, _ in with_step)


def _llama(**overrides: object) -> LlamaForCausalLM:
    cfg = dict(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    cfg.update(overrides)
    return LlamaForCausalLM(LlamaConfig(**cfg)).eval()


def test_build_declines_models_it_does_not_reproduce() -> None:
    assert LlamaDecodeStep.build(_llama()) is not None
    assert LlamaDecodeStep.build(_llama(attention_bias=True)) is None  # biases are not applied
    assert LlamaDecodeStep.build(_llama(hidden_act="gelu")) is None
    hooked = _llama()
    hooked.model.layers[0].mlp.register_forward_hook(lambda *a: None)
    assert LlamaDecodeStep.build(hooked) is None  # a hook would be skipped
    adapted = _llama()
    adapted.model.layers[0].self_attn.q_proj = torch.nn.Sequential(adapted.model.layers[0].self_attn.q_proj)
    assert LlamaDecodeStep.build(adapted) is None  # an adapter's module replaces the projection
    assert LlamaDecodeStep.build(torch.nn.Linear(2, 2)) is None
