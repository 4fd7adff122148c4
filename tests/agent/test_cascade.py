"""Cascade attention: rows sharing a prompt prefix read one copy of its KV in decode steps.

The attention must equal attention over the concatenated columns; the engine with it must
sample what the engine without it samples, store whole KV for the next turn, leave the
trainer's module on SDPA and drop the prefix when the weights change."""

from __future__ import annotations

import contextlib
import time
import types

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from skyrl_agent.models import tiny_random_model
from skyrl_agent.policies._cascade import CASCADE, SharedPrefix, _cascade_attention, cascade_step
from skyrl_agent.policies.hf import EngineConfig, HFPolicy
from skyrl_agent.types import GenerateRequest, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=10)


def _case(seed: int, dtype: torch.dtype = torch.float32) -> dict:
    g = torch.Generator().manual_seed(seed)
    B, H, KV, L, N, D = 4, 6, 2, 9, 13, 8
    t = {
        "q": torch.randn(B, H, 1, D, generator=g) * 2,
        "k": torch.randn(B, KV, L, D, generator=g),
        "v": torch.randn(B, KV, L, D, generator=g),
        "kp": torch.randn(1, KV, N, D, generator=g),
        "vp": torch.randn(1, KV, N, D, generator=g),
    }
    t = {name: x.to(dtype) for name, x in t.items()}
    own = torch.ones(B, L, dtype=torch.bool)
    own[1, :4] = False  # padding
    own[2, 5:7] = False  # a gap
    t["own"], t["N"], t["H"], t["KV"] = own, N, H, KV
    return t


@pytest.mark.parametrize("mask_kind", ["bool", "additive"])
@pytest.mark.parametrize("partial", [False, True])
def test_cascade_attention_equals_attention_over_the_concatenated_columns(
    mask_kind: str, partial: bool
) -> None:
    c = _case(0)
    B, N = c["q"].shape[0], c["N"]
    reads = None
    if partial:  # rows reading all, none, or the first 5 columns of the prefix
        reads = torch.arange(N)[None] < torch.tensor([N, 0, 5, N])[:, None]
    own_mask = c["own"][:, None, None, :]
    if mask_kind == "additive":
        own_mask = torch.zeros(own_mask.shape).masked_fill(~own_mask, torch.finfo(torch.float32).min)
    module = types.SimpleNamespace(num_key_value_groups=c["H"] // c["KV"], is_causal=True, layer_idx=0)
    prefix = SharedPrefix.from_kv(list(range(N)), [(c["kp"], c["vp"])], version=0)
    with cascade_step(prefix, reads):
        ours, _ = _cascade_attention(module, c["q"], c["k"], c["v"], own_mask, scaling=0.3)
    K = torch.cat([c["kp"].expand(B, -1, -1, -1), c["k"]], 2)
    V = torch.cat([c["vp"].expand(B, -1, -1, -1), c["v"]], 2)
    reads_BN = reads if reads is not None else torch.ones(B, N, dtype=torch.bool)
    ref, _ = sdpa_attention_forward(
        module, c["q"], K, V, torch.cat([reads_BN, c["own"]], 1)[:, None, None, :], scaling=0.3
    )
    assert ours.shape == ref.shape == (B, 1, c["H"], c["q"].shape[-1])
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-5)


def test_cascade_attention_in_bf16_is_as_exact_as_sdpa() -> None:
    c = _case(1, torch.bfloat16)
    B, N, H, KV = c["q"].shape[0], c["N"], c["H"], c["KV"]
    module = types.SimpleNamespace(num_key_value_groups=H // KV, is_causal=True, layer_idx=0)
    prefix = SharedPrefix.from_kv(list(range(N)), [(c["kp"], c["vp"])], version=0)
    K = torch.cat([c["kp"].expand(B, -1, -1, -1), c["k"]], 2)
    V = torch.cat([c["vp"].expand(B, -1, -1, -1), c["v"]], 2)
    keep = torch.cat([torch.ones(B, N, dtype=torch.bool), c["own"]], 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with cascade_step(prefix, None):
            ours, _ = _cascade_attention(module, c["q"], c["k"], c["v"], c["own"][:, None, None, :])
        sdpa, _ = sdpa_attention_forward(module, c["q"], K, V, keep[:, None, None, :])
    kk, vv = K.double().repeat_interleave(H // KV, 1), V.double().repeat_interleave(H // KV, 1)
    scores = (c["q"].double() @ kk.transpose(-1, -2) / c["q"].shape[-1] ** 0.5).masked_fill(
        ~keep[:, None, None, :], float("-inf")
    )
    exact = (torch.softmax(scores, -1) @ vv).transpose(1, 2)
    err_ours = float((ours.double() - exact).abs().max())
    err_sdpa = float((sdpa.double() - exact).abs().max())
    assert ours.dtype == torch.bfloat16
    # two bf16 roundings (the own columns' partial result, then the merged one) against SDPA's
    # one: measured 0.0046 against 0.0036, both within one bf16 step of values near 1
    assert err_ours <= 1.5 * err_sdpa, (err_ours, err_sdpa)


def test_calls_outside_a_cascade_step_are_sdpa_unchanged() -> None:
    c = _case(2)
    module = types.SimpleNamespace(num_key_value_groups=c["H"] // c["KV"], is_causal=True, layer_idx=0)
    mask = c["own"][:, None, None, :]
    ours, _ = _cascade_attention(module, c["q"], c["k"], c["v"], mask, scaling=0.3)
    ref, _ = sdpa_attention_forward(module, c["q"], c["k"], c["v"], mask, scaling=0.3)
    assert torch.equal(ours, ref)
    # a prefill (more than one query token) outside a step is SDPA too
    q3 = c["q"].repeat(1, 1, 3, 1)
    ours3, _ = _cascade_attention(module, q3, c["k"], c["v"], None, scaling=0.3)
    assert torch.equal(ours3, sdpa_attention_forward(module, q3, c["k"], c["v"], None, scaling=0.3)[0])


@pytest.mark.parametrize("autocast", [False, True])
def test_a_prefill_inside_a_step_attends_to_the_prefix_and_its_own_columns(autocast: bool) -> None:
    """Next turns prefilled over their own columns (causal within the new tokens, a left-padded
    row whose padding queries see no own column) equal attention over prefix + own columns."""
    g = torch.Generator().manual_seed(3)
    B, H, KV, P, Q, N, D = 3, 6, 2, 5, 4, 11, 8
    q = torch.randn(B, H, Q, D, generator=g) * 2
    k, v = torch.randn(B, KV, P + Q, D, generator=g), torch.randn(B, KV, P + Q, D, generator=g)
    kp, vp = torch.randn(1, KV, N, D, generator=g), torch.randn(1, KV, N, D, generator=g)
    valid = torch.ones(B, P + Q, dtype=torch.bool)
    valid[1, :2] = False  # a shorter past
    valid[2, : P + 2] = False  # no past and two padded query positions
    causal = torch.ones(Q, P + Q, dtype=torch.bool).tril(P)
    own_B1QL = (valid[:, None, :] & causal[None])[:, None]
    module = types.SimpleNamespace(num_key_value_groups=H // KV, is_causal=True, layer_idx=0)
    prefix = SharedPrefix.from_kv(list(range(N)), [(kp, vp)], version=0)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx, cascade_step(prefix, None):
        ours, _ = _cascade_attention(module, q, k, v, own_B1QL, scaling=0.3)
    K = torch.cat([kp.expand(B, -1, -1, -1), k], 2).double().repeat_interleave(H // KV, 1)
    V = torch.cat([vp.expand(B, -1, -1, -1), v], 2).double().repeat_interleave(H // KV, 1)
    keep = torch.cat([torch.ones(B, 1, Q, N, dtype=torch.bool), own_B1QL], -1)
    scores = (q.double() @ K.transpose(-1, -2) * 0.3).masked_fill(~keep, float("-inf"))
    exact = (torch.softmax(scores, -1) @ V).transpose(1, 2)
    assert ours.shape == (B, Q, H, D) and bool(torch.isfinite(ours).all())
    # bf16: the query, keys and values rounded to bf16 as autocast gives SDPA
    torch.testing.assert_close(ours.double(), exact, atol=3e-2 if autocast else 1e-6, rtol=0)
    # without a mask (SDPA's is_causal case) the own part is causal: row 0 as above
    with ctx, cascade_step(prefix, None):
        causal_only, _ = _cascade_attention(module, q[:1], k[:1], v[:1], None, scaling=0.3)
    torch.testing.assert_close(causal_only.double(), exact[:1], atol=3e-2 if autocast else 1e-6, rtol=0)


@pytest.mark.parametrize("autocast", [False, True])
def test_masked_prefill_reads_shared_heads_in_place_with_sdpas_numbers(
    autocast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several query tokens under a mask (a prefill over a past, left padding): the same output,
    bit for bit, as transformers' SDPA function, without its repeated keys and values."""
    g = torch.Generator().manual_seed(3)
    B, H, KV, Q, L, D = 3, 6, 2, 5, 17, 8
    q, k, v = (torch.randn(B, n, s, D, generator=g) for n, s in ((H, Q), (KV, L), (KV, L)))
    mask = torch.ones(B, 1, Q, L, dtype=torch.bool).tril(L - Q)
    mask[1, :, :, :4] = False  # a left-padded row
    module = types.SimpleNamespace(num_key_value_groups=H // KV, is_causal=True, layer_idx=0)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.3)
        import transformers.integrations.sdpa_attention as sdpa_module

        def no_repeat(*args: object) -> None:
            raise AssertionError("keys and values were repeated per query head")

        monkeypatch.setattr(sdpa_module, "repeat_kv", no_repeat)
        ours, _ = _cascade_attention(module, q, k, v, mask, scaling=0.3)
    assert ours.shape == (B, Q, H, D)
    assert torch.equal(ours, ref)


def test_shared_with_counts_the_common_leading_tokens() -> None:
    prefix = SharedPrefix(ids=[1, 2, 3, 4, 5], keys=[], values=[], stored=[], version=0)
    assert prefix.shared_with([1, 2, 3, 4, 5, 6]) == 5
    assert prefix.shared_with([1, 2, 3]) == 3
    assert prefix.shared_with([1, 2, 9, 4, 5]) == 2
    assert prefix.shared_with([7]) == 0


_SYSTEM = "System: you are a careful assistant who uses the calculator tool for every sum. " * 3


def _three_turns(policy: HFPolicy, tok, prompts: list[list[int]]) -> list:
    """Two samples of each prompt, then two more turns each, every turn continuing the last."""
    reqs = [GenerateRequest(p, GREEDY) for p in prompts for _ in range(2)]
    outs = []
    for _ in range(3):
        got = policy.generate_sync(reqs)
        outs += got
        reqs = [
            GenerateRequest(
                list(r.prompt_ids) + o.token_ids + tok.encode("\nObservation: 42\nAssistant:"), GREEDY
            )
            for r, o in zip(reqs, got, strict=True)
        ]
    return outs


def test_engine_with_cascade_samples_what_it_samples_without() -> None:
    """Rows under one system prompt (two groups, then their next turns from stored KV, the
    prefix put back in front of what a row held itself, prefilled over their own columns with
    the prefix read once) and a row without it, in the same batches."""
    model, tok = tiny_random_model()
    prompts = [tok.encode(_SYSTEM + f"User: {q}\nAssistant:") for q in ("what is 17 + 25?", "hi")]
    prompts.append(tok.encode("No system prompt here."))
    on = HFPolicy(model, tok, autocast_bf16=True, engine=EngineConfig(max_rows=8, cascade_min_tokens=32))
    off = HFPolicy(model, tok, autocast_bf16=True, engine=EngineConfig(max_rows=8, cascade_min_tokens=0))
    try:
        assert on.engine.runner.cascade_on
        assert on.engine._run.config._attn_implementation == CASCADE
        assert model.config._attn_implementation == "sdpa"  # the trainer's module is not switched
        got = _three_turns(on, tok, prompts)
        want = _three_turns(off, tok, prompts)
        s_on, s_off = on.engine_stats(), off.engine_stats()
    finally:
        on.close()
        off.close()
    assert s_on.cascade_rows_decoded > 0 and s_off.cascade_rows_decoded == 0
    # the next turns ran over their own columns, the prefix read from its one copy
    assert s_on.cascade_prefill_rows > 0 and s_off.cascade_prefill_rows == 0
    assert s_on.cascade_columns_saved >= 2 * len(tok.encode(_SYSTEM))
    # the next turns found the whole of their last turn's KV, prefix included
    assert s_on.reused_tokens == s_off.reused_tokens
    assert s_on.prefill_tokens == s_off.prefill_tokens
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids
        # bf16 attention outputs round differently (SDPA's kernel vs float32 matmuls)
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=2e-2, rtol=0)


def test_a_weight_update_drops_the_shared_prefix() -> None:
    model, tok = tiny_random_model()
    prompts = [tok.encode(_SYSTEM + f"User: {q}\nAssistant:") for q in ("a", "b")]
    policy = HFPolicy(model, tok, autocast_bf16=True, engine=EngineConfig(cascade_min_tokens=32))
    try:
        policy.generate_sync([GenerateRequest(p, GREEDY) for p in prompts])
        assert policy.engine.runner.shared is not None
        old = policy.engine.runner.shared
        state = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}
        policy.update_weights(state)
        assert policy.engine.runner.shared is None
        got = policy.generate_sync([GenerateRequest(p, GREEDY) for p in prompts])
        assert policy.engine.runner.shared is not None and policy.engine.runner.shared.version != old.version
    finally:
        policy.close()
    fresh = HFPolicy(model, tok, autocast_bf16=True, engine=EngineConfig(cascade_min_tokens=0))
    try:  # what the new weights sample with no prefix of the old ones anywhere
        want = fresh.generate_sync([GenerateRequest(p, GREEDY) for p in prompts])
    finally:
        fresh.close()
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=2e-2, rtol=0)


def test_a_row_running_alone_adopts_the_prefix_its_late_batch_shares() -> None:
    """A request that starts alone (no prefix shared yet) and a group that joins while it runs:
    the running row drops its own copy of the prefix once the group makes it shared, so the
    buffers shrink to the rows' own columns; everything sampled stays as without cascade."""
    model, tok = tiny_random_model()
    first = GenerateRequest(
        tok.encode(_SYSTEM + "User: tell me a story\nAssistant:"), GREEDY.replace(max_tokens=40)
    )
    late = [GenerateRequest(tok.encode(_SYSTEM + f"User: {q}\nAssistant:"), GREEDY) for q in ("a", "b", "c")]

    def run(cascade_min_tokens: int) -> tuple[list, int, int]:
        policy = HFPolicy(
            model,
            tok,
            autocast_bf16=True,
            engine=EngineConfig(max_rows=8, cascade_min_tokens=cascade_min_tokens),
        )
        engine = policy.engine
        assert engine is not None
        try:
            fut = engine.submit(first)
            while engine.stats().decode_steps < 3:  # the first row is decoding, alone
                time.sleep(0.001)
            widths = []
            real = engine.runner.decode

            def spy() -> None:
                widths.append(engine._slots.t)
                real()

            engine.runner.decode = spy  # type: ignore[method-assign]
            outs = [f.result(timeout=60) for f in [engine.submit(r) for r in late]]
            outs.append(fut.result(timeout=60))
            return outs, max(widths[1:]), engine.stats().cascade_rows_decoded
        finally:
            policy.close()

    got, width_on, cascade_rows = run(32)
    want, width_off, _ = run(0)
    assert cascade_rows > 0
    prefix = len(tok.encode(_SYSTEM))
    assert width_off > prefix and width_on < width_off - prefix // 2, (width_on, width_off)
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=2e-2, rtol=0)


def test_common_prefix_counts_shared_leading_tokens_up_to_a_limit() -> None:
    from skyrl_agent._prefix import common_prefix

    assert common_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert common_prefix([1, 2, 3], [1, 2, 3, 4, 5]) == 3
    assert common_prefix([1, 2, 3], [1, 2, 3], limit=2) == 2
    assert common_prefix([], [1]) == 0 and common_prefix((5, 6), [5, 6]) == 2
