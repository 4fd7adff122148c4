"""The train step: logprob alignment, micro-batch invariance, PPO updates against old logprobs."""

import copy

import pytest
import torch
import transformers

from trainers.batch import TrainBatch
from trainers.config import TrainConfig
from trainers.logprobs import token_logprobs
from trainers.step import micro_batches, train_step
from trainers.types import LossReduction


def tiny_lm(seed=0):
    cfg = transformers.LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).eval()


def make_batch(B=5, T=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 40, (B, T), generator=g)
    lengths = torch.tensor([T, T - 2, T - 1, T - 3, T])[:B]
    attn = (torch.arange(T)[None, :] < lengths[:, None]).long()
    ids = ids * attn  # pad id 0
    mask = torch.zeros(B, T)
    mask[:, 3:] = 1.0
    mask[1, 5] = 0.0  # an observation token inside the response
    mask = mask * attn
    adv = torch.randn(B, 1, generator=g).expand(B, T) * mask
    return TrainBatch(
        input_ids_BT=ids,
        attention_mask_BT=attn,
        mask_BT=mask,
        rollout_logprobs_BT=None,
        token_rewards_BT=torch.zeros(B, T),
        rewards_B=torch.zeros(B),
        group_ids_B=torch.tensor([0, 0, 1, 1, 2])[:B],  # groups of unequal token counts
        advantages_BT=adv.contiguous(),
    )


def grads_after_step(
    micro_batch_size, reduction="token_mean", updates=1, micro_batch_tokens=0, train_memory_gb=8.0
):
    model = tiny_lm()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: keep the weights, look at grads
    cfg = TrainConfig(
        micro_batch_size=micro_batch_size,
        micro_batch_tokens=micro_batch_tokens,
        train_memory_gb=train_memory_gb,
        bf16=False,
        reduction=reduction,
        grad_clip=0.0,
        updates_per_step=updates,
    )
    grads = {}

    def keep(_opt, _args, _kwargs):
        for name, p in model.named_parameters():
            grads[name] = p.grad.detach().clone()

    opt.register_step_pre_hook(keep)
    stats = train_step(model, opt, make_batch(), cfg)
    return grads, stats


def test_token_logprobs_align_with_next_token():
    model = tiny_lm()
    ids = torch.randint(0, 40, (2, 6))
    lp, ent = token_logprobs(model, ids, torch.ones_like(ids), with_entropy=True)
    logits = model(input_ids=ids).logits.float()
    expected = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert torch.allclose(lp[:, 1:], expected, atol=1e-5)
    assert torch.all(lp[:, 0] == 0) and torch.all(ent[:, 1:] > 0)


@pytest.mark.parametrize("reduction", list(LossReduction))
def test_micro_batches_give_the_full_batch_gradient(reduction):
    full, s1 = grads_after_step(5, reduction)
    micro, s2 = grads_after_step(2, reduction)
    for name in full:
        assert torch.allclose(full[name], micro[name], atol=1e-6, rtol=1e-4), name
    assert s1.policy_loss == pytest.approx(s2.policy_loss, abs=1e-6)
    assert s1.num_tokens == int(make_batch().mask_BT.sum())


def test_token_bounded_micro_batches_give_the_full_batch_gradient():
    """Rows of 9, 7, 8, 6 and 9 tokens, at most 16 computed: micro-batches of 2, 2 and 1 rows."""
    assert micro_batches(make_batch(), 5, 16) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    full, s1 = grads_after_step(5)
    micro, s2 = grads_after_step(5, micro_batch_tokens=16)
    for name in full:
        assert torch.allclose(full[name], micro[name], atol=1e-6, rtol=1e-4), name
    assert s1.policy_loss == pytest.approx(s2.policy_loss, abs=1e-6)


def test_micro_batches_count_a_shared_prefix_once():
    """Four rows sharing 10 untrained tokens, then 5, 5, 20 and 5 of their own: 20 tokens take
    the first two rows, the third alone is over the bound and runs alone; without sharing
    (FSDP2) every row counts whole."""
    B, T = 4, 30
    ids = torch.randint(1, 40, (B, T), generator=torch.Generator().manual_seed(0))
    ids[:, :10] = ids[0, :10]
    lengths = torch.tensor([15, 15, 30, 15])
    attn = (torch.arange(T)[None] < lengths[:, None]).long()
    mask = attn.float()
    mask[:, :10] = 0
    batch = TrainBatch(
        input_ids_BT=ids * attn,
        attention_mask_BT=attn,
        mask_BT=mask,
        rollout_logprobs_BT=None,
        token_rewards_BT=torch.zeros(B, T),
        rewards_B=torch.zeros(B),
        group_ids_B=torch.zeros(B, dtype=torch.long),
    )
    assert micro_batches(batch, 8, 20) == [slice(0, 2), slice(2, 3), slice(3, 4)]
    assert micro_batches(batch, 8, 0) == [slice(0, 4)]
    assert micro_batches(batch, 3, 0) == [slice(0, 3), slice(3, 4)]
    assert micro_batches(batch, 8, 20, shared_prefix=False) == [
        slice(0, 1),
        slice(1, 2),
        slice(2, 3),
        slice(3, 4),
    ]
    with pytest.raises(Exception, match="micro_batch_tokens"):
        TrainConfig(micro_batch_tokens=-1)


def test_advantages_on_untrained_positions_do_not_matter():
    batch = make_batch()
    noisy = copy.deepcopy(batch)
    noisy.advantages_BT = batch.advantages_BT + 100.0 * (1 - batch.mask_BT)  # garbage off the mask
    grads = []
    for b in (batch, noisy):
        model = tiny_lm()
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        seen = {}
        emb = model.get_input_embeddings().weight
        opt.register_step_pre_hook(lambda *_, s=seen, w=emb: s.update(g=w.grad.clone()))
        train_step(model, opt, b, TrainConfig(micro_batch_size=2, bf16=False, grad_clip=0.0))
        grads.append(seen["g"])
    assert torch.allclose(grads[0], grads[1])


def test_several_updates_clip_against_old_logprobs():
    model = tiny_lm()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-2)
    cfg = TrainConfig(micro_batch_size=2, bf16=False, updates_per_step=4, eps_low=0.05, eps_high=0.05)
    batch = make_batch()
    stats = train_step(model, opt, batch, cfg)
    assert batch.old_logprobs_BT is not None
    assert stats.ratio_max > 1.0  # later updates saw moved weights
    assert stats.clip_frac > 0.0  # and were clipped
    assert stats.grad_norm > 0 and stats.tokens_per_s > 0


def test_update_raises_the_logprob_of_positive_advantage_tokens():
    model = tiny_lm()
    batch = make_batch()
    batch.advantages_BT = batch.mask_BT.clone()  # every trained token is good
    before, _ = token_logprobs(model, batch.input_ids_BT, batch.attention_mask_BT)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    cfg = TrainConfig(micro_batch_size=3, bf16=False)
    for _ in range(3):
        train_step(model, opt, batch, cfg)
    after, _ = token_logprobs(model, batch.input_ids_BT, batch.attention_mask_BT)
    m = batch.mask_BT.bool()
    assert after[m].mean() > before[m].mean() + 0.1


def test_missing_advantages_is_a_clear_error():
    batch = make_batch()
    batch.advantages_BT = None
    with pytest.raises(ValueError, match="advantages_BT"):
        train_step(tiny_lm(), torch.optim.SGD(tiny_lm().parameters(), lr=0.1), batch, TrainConfig())


def test_shared_prefix_gives_the_same_logprobs_and_gradients():
    from trainers.logprobs import shared_prefix_len

    batch = make_batch(B=4, T=12)
    batch.input_ids_BT[:, :5] = batch.input_ids_BT[0, :5]  # a common system prompt
    prefix = shared_prefix_len(batch.input_ids_BT, batch.mask_BT)
    assert prefix == 3  # limited by the first trained position, not by the 5 shared tokens
    batch.mask_BT[:, :6] = 0
    prefix = shared_prefix_len(batch.input_ids_BT, batch.mask_BT)
    assert prefix == 5
    results = []
    for p in (0, prefix):
        model = tiny_lm()
        lp, ent = token_logprobs(
            model, batch.input_ids_BT, batch.attention_mask_BT, with_entropy=True, prefix_len=p
        )
        (lp * batch.mask_BT).sum().backward()
        grads = [q.grad.clone() for q in model.parameters()]
        results.append((lp * batch.mask_BT, ent * batch.mask_BT, grads))
    (lp0, ent0, g0), (lp1, ent1, g1) = results
    assert torch.allclose(lp0, lp1, atol=1e-5) and torch.allclose(ent0, ent1, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g0, g1, strict=True))
