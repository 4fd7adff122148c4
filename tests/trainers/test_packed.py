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


@pytest.mark.parametrize(("block_tokens", "split"), [(0, False), (20, False), (1024, False), (1024, True)])
def test_packed_equals_padded_and_unshared(block_tokens, split, monkeypatch):
    """Suffixes of 16, 2, 10, 0 and 23 tokens: one attention call each (0), blocks [16, 2],
    [10], [23] (20), one block over the whole packed row (1024); or (split, CPU's default) the
    prefix attended apart from each suffix's own columns."""
    import trainers._packed

    monkeypatch.setattr(trainers._packed, "BLOCK_TOKENS", block_tokens)
    monkeypatch.setattr(trainers._packed, "SPLIT_PREFIX", split)
    calls = []
    apply = trainers._packed._PrefixThenOwn.apply
    monkeypatch.setattr(trainers._packed._PrefixThenOwn, "apply", lambda *a: calls.append(a[3]) or apply(*a))
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
    assert bool(calls) == split  # the packed forward took the path under test
    assert not any("masks" in segments.__dict__ for segments in calls)  # built only when read
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


def test_own_batches_group_similar_lengths():
    """Suffixes sorted longest first, padded into one batch while at least OWN_BATCH_FILL of the
    longest; a padding slot repeats its suffix's last position and is not kept."""
    import trainers._packed

    seg = Segments.of(3, [4, 0, 10, 9, 2, 3], torch.device("cpu"))
    # packed starts: 0 (4 tokens), 4 (10), 14 (9), 23 (2), 25 (3)
    assert [tuple(b.index_NM.shape) for b in seg.own] == [(2, 10), (2, 4), (1, 2)]
    first, second, third = seg.own
    assert first.index_NM[1].tolist() == list(range(14, 23)) + [22]  # the 9-token suffix, padded
    assert first.pos_K.tolist() == list(range(4, 14)) + list(range(14, 23))
    assert second.index_NM.tolist() == [[0, 1, 2, 3], [25, 26, 27, 27]]
    assert second.pos_K.tolist() == [0, 1, 2, 3, 25, 26, 27]
    assert third.pos_K.tolist() == [23, 24]
    covered = sorted(p for b in seg.own for p in b.pos_K.tolist())
    assert covered == list(range(28))  # every packed token in exactly one batch
    assert trainers._packed.OWN_BATCH_FILL == 0.75


@pytest.mark.parametrize("prefix", [0, 5])
def test_split_attention_equals_masked_sdpa_with_gradients(prefix):
    """_PrefixThenOwn against one masked SDPA call over all the columns (float32, grouped-query
    heads): the same output and the same gradients for queries, keys and values."""
    from trainers._packed import _PrefixThenOwn

    torch.manual_seed(0)
    lengths = [6, 1, 0, 9, 4]
    seg = Segments.of(prefix, lengths, torch.device("cpu"), block_tokens=10_000)
    S = sum(lengths)
    q = torch.randn(1, 4, S, 8, requires_grad=True)
    k = torch.randn(1, 2, prefix + S, 8, requires_grad=True)
    v = torch.randn(1, 2, prefix + S, 8, requires_grad=True)
    g = torch.randn(1, S, 4, 8)
    (mask,) = seg.masks
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    ref_grads = torch.autograd.grad((ref.transpose(1, 2) * g).sum(), (q, k, v))
    out = _PrefixThenOwn.apply(q, k, v, seg, 8**-0.5)
    grads = torch.autograd.grad((out * g).sum(), (q, k, v))
    assert out.shape == (1, S, 4, 8)
    assert torch.allclose(out, ref.transpose(1, 2), atol=1e-5)
    for a, b in zip(grads, ref_grads, strict=True):
        assert b.abs().max() > 0
        assert torch.allclose(a, b, atol=1e-5)
