"""Logprobs and entropies: from logits against hand-worked values, and the fused LM-head path (the
default) against the full-logits reference path: same numbers."""

import math

import pytest
import torch

from skyrl_agent.models import tiny_random_model
from tests.trainers.test_step import make_batch, tiny_lm
from trainers.config import TrainConfig
from trainers.logprobs import (
    entropy_from_logits,
    forward_logprobs,
    shared_prefix_len,
    token_logprobs_from_logits,
)
from trainers.step import train_step

# ---------------------------------------------------------------- from logits


def test_entropy_by_hand():
    # uniform over 8: log 8 = 2.079442. logits [0, log 3]: p = [0.25, 0.75],
    # H = 0.25 * ln 4 + 0.75 * ln(4/3) = 0.346574 + 0.215762 = 0.562335
    logits_BTV = torch.zeros(1, 2, 2)
    logits_BTV[0, 1, 1] = math.log(3)
    torch.testing.assert_close(entropy_from_logits(logits_BTV), torch.tensor([[math.log(2), 0.562335]]))
    assert entropy_from_logits(torch.zeros(2, 3, 8)).sub(math.log(8)).abs().max() < 1e-6


@pytest.mark.parametrize("chunk_size", [1, 3, 100])
def test_chunked_entropy_and_logprobs_match_the_direct_formulas_with_gradient(chunk_size):
    torch.manual_seed(4)
    logits = (torch.randn(2, 3, 11) * 2).requires_grad_(True)
    ids_BT = torch.randint(0, 11, (2, 3))
    ent_BT = entropy_from_logits(logits, chunk_size=chunk_size)
    lp_BT = token_logprobs_from_logits(logits, ids_BT, chunk_size=chunk_size)
    weights_BT = torch.randn(2, 3)
    (grad,) = torch.autograd.grad(((ent_BT + lp_BT) * weights_BT).sum(), logits)
    ref_logits = logits.detach().clone().requires_grad_(True)
    ref_ent = torch.distributions.Categorical(logits=ref_logits).entropy()
    ref_lp = torch.log_softmax(ref_logits, -1).gather(-1, ids_BT[..., None]).squeeze(-1)
    (g_ref,) = torch.autograd.grad(((ref_ent + ref_lp) * weights_BT).sum(), ref_logits)
    torch.testing.assert_close(ent_BT, ref_ent)
    torch.testing.assert_close(lp_BT, ref_lp)
    torch.testing.assert_close(grad, g_ref)


def test_token_logprobs_by_hand_and_in_bf16():
    logits_BTV = torch.tensor([[[0.0, math.log(3)]]])
    # p(token 1) = 3 / (1 + 3) = 0.75; log 0.75 = -0.287682
    lp = token_logprobs_from_logits(logits_BTV, torch.tensor([[1]]))
    assert lp.item() == pytest.approx(-0.287682, abs=1e-6)
    lp16 = token_logprobs_from_logits(logits_BTV.bfloat16(), torch.tensor([[1]]))
    assert lp16.dtype == torch.float32 and lp16.item() == pytest.approx(-0.287682, abs=1e-2)


# ---------------------------------------------------------------- from a model


@pytest.fixture(scope="module")
def vocab_model():
    """A tiny Llama with the real 49k-token vocabulary and tied embeddings (as SmolLM2)."""
    model, _ = tiny_random_model(hidden_size=32, num_layers=2)
    return model


def _batch_for(model, B=4, T=20, seed=0):
    batch = make_batch(B=B, T=T, seed=seed)
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    batch.input_ids_BT = torch.randint(1, V, (B, T), generator=g) * batch.attention_mask_BT
    batch.input_ids_BT[:, :6] = batch.input_ids_BT[0, :6]  # a shared system prompt
    batch.mask_BT[:, :7] = 0
    return batch


def _run(model, batch, fused, **kw):
    model.zero_grad(set_to_none=True)
    out = forward_logprobs(
        model, batch.input_ids_BT, batch.attention_mask_BT, mask_BT=batch.mask_BT, fused_head=fused, **kw
    )
    m = batch.mask_BT
    loss = (out.logprobs_BT * m * torch.linspace(-1, 1, m.shape[1])).sum()  # varied token weights
    if kw.get("entropy_grad"):
        loss = loss + 0.3 * (out.entropy_BT * m).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.logprobs_BT * m, None if out.entropy_BT is None else out.entropy_BT * m, grads


@pytest.mark.parametrize("prefix", [False, True])
@pytest.mark.parametrize("entropy_grad", [False, True])
@pytest.mark.parametrize("keep_logits", [True, False])
def test_fused_head_equals_full_logits(vocab_model, prefix, entropy_grad, keep_logits, monkeypatch):
    """Against the full-logits path, with the logits kept for the backward (small batches) and
    recomputed there (past ``KEEP_LOGITS_BYTES``)."""
    import trainers.logprobs

    if not keep_logits:
        monkeypatch.setattr(trainers.logprobs, "KEEP_LOGITS_BYTES", 0)
    batch = _batch_for(vocab_model)
    P = shared_prefix_len(batch.input_ids_BT, batch.mask_BT) if prefix else 0
    assert not prefix or P == 6
    kw = dict(with_entropy=True, entropy_grad=entropy_grad, prefix_len=P)
    lp_ref, ent_ref, g_ref = _run(vocab_model, batch, False, **kw)
    lp, ent, g = _run(vocab_model, batch, True, **kw)
    assert torch.allclose(lp, lp_ref, atol=2e-5) and torch.allclose(ent, ent_ref, atol=2e-5)
    assert g.keys() == g_ref.keys()
    for name in g_ref:
        assert torch.allclose(g[name], g_ref[name], atol=1e-6, rtol=1e-4), name


def test_kept_logits_give_the_recomputed_gradients_under_bf16(vocab_model, monkeypatch):
    """Keeping the head's bf16 logits for the backward changes no bit of the gradients: they are
    the same matmul's output the backward would compute again."""
    import trainers.logprobs

    batch = _batch_for(vocab_model)
    _, _, kept = _run(vocab_model, batch, True, bf16=True)
    monkeypatch.setattr(trainers.logprobs, "KEEP_LOGITS_BYTES", 0)
    _, _, again = _run(vocab_model, batch, True, bf16=True)
    assert kept.keys() == again.keys()
    assert all(torch.equal(kept[n], again[n]) for n in kept)


def test_fused_head_under_bf16_stays_close(vocab_model):
    batch = _batch_for(vocab_model)
    lp_ref, _, g_ref = _run(vocab_model, batch, False, bf16=True)
    lp, _, g = _run(vocab_model, batch, True, bf16=True)
    assert (lp - lp_ref).abs().max() < 0.05
    for name in g_ref:
        assert (g[name] - g_ref[name]).norm() <= 0.05 * g_ref[name].norm() + 1e-8, name


def test_only_masked_positions_are_computed(vocab_model):
    batch = _batch_for(vocab_model)
    with torch.no_grad():
        masked = forward_logprobs(
            vocab_model, batch.input_ids_BT, batch.attention_mask_BT, mask_BT=batch.mask_BT
        )
        full = forward_logprobs(vocab_model, batch.input_ids_BT, batch.attention_mask_BT)
    on = batch.mask_BT.bool()
    assert torch.all(masked.logprobs_BT[~on] == 0)
    assert torch.allclose(masked.logprobs_BT[on], full.logprobs_BT[on], atol=1e-5)
    assert torch.all(full.logprobs_BT[:, 1:] < 0)  # no mask: every position from 1 on


def test_a_head_that_cannot_be_fused_takes_the_checkpointed_path():
    from trainers.lora import apply_lora

    model = apply_lora(tiny_lm(), rank=2, alpha=4, target_modules=("lm_head", "q_proj"))
    with torch.no_grad():  # move B off zero so the head's adapter matters
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    batch = make_batch()
    lp_ref, _, g_ref = _run(model, batch, False, with_entropy=True)
    lp, _, g = _run(model, batch, True, with_entropy=True)
    assert torch.allclose(lp, lp_ref, atol=1e-5)
    assert any("lm_head" in n for n in g)
    for name in g_ref:
        assert torch.allclose(g[name], g_ref[name], atol=1e-6, rtol=1e-4), name


@pytest.mark.parametrize("extra", [{}, {"entropy_coef": 0.01, "kl_coef": 0.1}, {"updates_per_step": 2}])
def test_train_step_losses_and_gradients_do_not_depend_on_the_path(extra):
    results = []
    for fused in (False, True):
        model = tiny_lm()
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        grads = {}
        opt.register_step_pre_hook(
            lambda *_, m=model, g=grads: g.update({n: p.grad.clone() for n, p in m.named_parameters()})
        )
        ref = tiny_lm(seed=1)
        cfg = TrainConfig(micro_batch_size=2, bf16=False, grad_clip=0.0, fused_head=fused, **extra)

        def ref_fn(ids, attn, prefix=0, mask=None, ref=ref, fused=fused):
            return forward_logprobs(
                ref, ids, attn, prefix_len=prefix, mask_BT=mask, fused_head=fused
            ).logprobs_BT

        stats = train_step(model, opt, make_batch(), cfg, ref_logprobs_fn=ref_fn)
        results.append((stats, grads))
    (s_ref, g_ref), (s, g) = results
    for key in ("policy_loss", "kl", "entropy", "grad_norm", "approx_kl"):
        assert getattr(s, key) == pytest.approx(getattr(s_ref, key), rel=1e-5, abs=1e-7), key
    for name in g_ref:
        assert torch.allclose(g[name], g_ref[name], atol=1e-7, rtol=1e-4), name
