"""The shared-prefix forward with the suffixes packed into one row (trainers._packed) against the
padded batch over a repeated cache and against no prefix sharing at all: same logprobs and the
same gradients, on rows of very different lengths (the padding the packing removes)."""

import pytest
import torch
import transformers

from trainers._packed import PACKED, Segments, use_packed_attention
from trainers.logprobs import forward_logprobs, shared_prefix_len


def _lm(attn: str = "sdpa", seed: int = 0) -> transformers.LlamaForCausalLM:
    cfg = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, as SmolLM2
        attn_implementation=attn,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).eval()


def _batch(lengths=(23, 9, 17, 7, 30), prefix=7, seed=0):
    """Right-padded rows sharing ``prefix`` tokens, trained from the token after the prefix on (by
    default one row is the prefix alone, one has an untrained observation in the middle)."""
    g = torch.Generator().manual_seed(seed)
    B, T = len(lengths), max(lengths)
    attn_BT = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    ids_BT = torch.randint(1, 50, (B, T), generator=g) * attn_BT
    ids_BT[:, :prefix] = ids_BT[0, :prefix]
    mask_BT = attn_BT.float()
    mask_BT[:, : prefix + 1] = 0
    mask_BT[0, 12:15] = 0  # an observation
    return ids_BT, attn_BT, mask_BT


def _logprobs_and_grads(model, ids_BT, attn_BT, mask_BT, prefix_len, bf16=False):
    model.zero_grad(set_to_none=True)
    out = forward_logprobs(model, ids_BT, attn_BT, mask_BT=mask_BT, prefix_len=prefix_len, bf16=bf16)
    weights_T = torch.linspace(-1, 1, ids_BT.shape[1])  # varied token weights
    (out.logprobs_BT * mask_BT * weights_T).sum().backward()
    return out.logprobs_BT * mask_BT, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("block_tokens", [0, 20, 1024])
def test_packed_equals_padded_and_unshared(block_tokens, monkeypatch):
    """Suffixes of 16, 2, 10, 0 and 23 tokens: one attention call each (0), blocks [16, 2],
    [10], [23] (20), one block over the whole packed row (1024)."""
    import trainers._packed

    monkeypatch.setattr(trainers._packed, "BLOCK_TOKENS", block_tokens)
    ids_BT, attn_BT, mask_BT = _batch()
    P = shared_prefix_len(ids_BT, mask_BT)
    assert P == 7
    results = {}
    for name, attn, prefix in (("plain", "sdpa", 0), ("padded", "eager", P), ("packed", "sdpa", P)):
        model = _lm(attn)
        results[name] = _logprobs_and_grads(model, ids_BT, attn_BT, mask_BT, prefix)
        assert (
            model.config._attn_implementation == {"plain": "sdpa", "padded": "eager", "packed": PACKED}[name]
        )
    lp0, g0 = results["plain"]
    assert lp0.abs().sum() > 0
    for name in ("padded", "packed"):
        lp, g = results[name]
        assert torch.allclose(lp, lp0, atol=1e-5), name
        for k in g0:
            assert torch.allclose(g[k], g0[k], atol=1e-6, rtol=1e-4), (name, k)


def test_packed_under_bf16_stays_close_to_the_padded_path():
    ids_BT, attn_BT, mask_BT = _batch(seed=3)
    P = shared_prefix_len(ids_BT, mask_BT)
    lp_pad, _ = _logprobs_and_grads(_lm("eager"), ids_BT, attn_BT, mask_BT, P, bf16=True)
    lp_pack, _ = _logprobs_and_grads(_lm("sdpa"), ids_BT, attn_BT, mask_BT, P, bf16=True)
    assert (lp_pack - lp_pad).abs().max() < 0.05


def test_the_switched_model_is_plain_sdpa_outside_a_packed_forward():
    ids_BT, attn_BT, _ = _batch()
    model = _lm("sdpa")
    with torch.no_grad():
        before = model(input_ids=ids_BT, attention_mask=attn_BT).logits
        assert use_packed_attention(model)
        assert model.config._attn_implementation == PACKED
        after = model(input_ids=ids_BT, attention_mask=attn_BT).logits
    assert torch.equal(before, after)
    assert not use_packed_attention(_lm("eager"))  # other implementations are left alone


def test_segments_masks():
    seg = Segments.of(2, [3, 0, 1], torch.device("cpu"), block_tokens=0)
    assert seg.bounds == ((0, 3), (3, 4))
    assert seg.masks[0][0, 0].tolist() == [
        [True, True, True, False, False],
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]
    assert seg.masks[1][0, 0].tolist() == [[True, True, True]]
    # one block: each suffix sees the prefix and itself, never the other suffix
    seg = Segments.of(1, [2, 0, 2, 5], torch.device("cpu"), block_tokens=4)
    assert seg.bounds == ((0, 4), (4, 9))
    assert seg.masks[0][0, 0].tolist() == [
        [True, True, False, False, False],
        [True, True, True, False, False],
        [True, False, False, True, False],
        [True, False, False, True, True],
    ]
    assert seg.masks[1].shape == (1, 1, 5, 6)


@pytest.mark.parametrize("lengths", [(12, 12, 12), (9, 30)])
def test_equal_and_two_row_batches(lengths):
    ids_BT, attn_BT, mask_BT = _batch(lengths=lengths, seed=5)
    mask_BT[:, :8] = 0
    P = shared_prefix_len(ids_BT, mask_BT)
    lp_plain, g_plain = _logprobs_and_grads(_lm("sdpa"), ids_BT, attn_BT, mask_BT, 0)
    lp_pack, g_pack = _logprobs_and_grads(_lm("sdpa"), ids_BT, attn_BT, mask_BT, P)
    assert torch.allclose(lp_pack, lp_plain, atol=1e-5)
    assert all(torch.allclose(g_pack[k], g_plain[k], atol=1e-6, rtol=1e-4) for k in g_plain)
