"""Policy losses, reductions and the entropy bonus against hand-worked values, plus their invariants."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from skyrl_gym.errors import ConfigError
from trainers import (
    LossReduction,
    PolicyLossConfig,
    PolicyLossType,
    cispo_loss,
    dro_loss,
    entropy_bonus_loss,
    gspo_loss,
    importance_sampling_loss,
    policy_loss,
    ppo_clip_loss,
    reduce_loss,
    reduction_weights,
)

NAN, INF = float("nan"), float("inf")


def leaf(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


# ---------------------------------------------------------------- reductions


LOSS_BT = torch.tensor([[1.0, 2, 3, 4], [5, 6, 7, 8]])
MASK_BT = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])


def test_token_mean():
    # (1 + 2 + 5 + 6 + 7) / 5 tokens = 21 / 5
    assert reduce_loss(LOSS_BT, MASK_BT, "token_mean").item() == pytest.approx(4.2)
    # with the token count of a whole optimizer step (micro-batching): 21 / 10
    assert reduce_loss(LOSS_BT, MASK_BT, "token_mean", num_tokens=10).item() == pytest.approx(2.1)


def test_seq_mean_token_mean():
    # sequence means (1 + 2)/2 = 1.5 and (5 + 6 + 7)/3 = 6; their mean (1.5 + 6)/2 = 3.75
    assert reduce_loss(LOSS_BT, MASK_BT, LossReduction.SEQ_MEAN_TOKEN_MEAN).item() == pytest.approx(3.75)
    assert reduce_loss(LOSS_BT, MASK_BT, "seq_mean_token_mean", num_sequences=5).item() == pytest.approx(
        7.5 / 5
    )


def test_seq_mean_token_sum_norm_is_dr_grpo_constant_normalization():
    # sum 21 / (B=2 * T=4) = 2.625 by default; with the max generation length 10: 21 / 20 = 1.05
    assert reduce_loss(LOSS_BT, MASK_BT, "seq_mean_token_sum_norm").item() == pytest.approx(2.625)
    got = reduce_loss(LOSS_BT, MASK_BT, "seq_mean_token_sum_norm", norm_constant=10)
    assert got.item() == pytest.approx(1.05)


def test_seq_mean_token_sum():
    # sequence sums 1 + 2 = 3 and 5 + 6 + 7 = 18; their mean 10.5
    assert reduce_loss(LOSS_BT, MASK_BT, "seq_mean_token_sum").item() == pytest.approx(10.5)
    assert reduce_loss(LOSS_BT, MASK_BT, "seq_mean_token_sum", num_sequences=3).item() == pytest.approx(7.0)


LOSS4_BT = torch.tensor([[1.0, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]])
MASK4_BT = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]])
GROUPS4_B = torch.tensor([7, 7, 3, 3])  # two prompts, any ids


def test_prompt_mean_weighs_every_prompt_alike():
    # prompt 7: tokens 1, 2, 4, 5, 6 -> 18 / 5 = 3.6; prompt 3: 7, 10, 11 -> 28 / 3; mean of the two
    got = reduce_loss(LOSS4_BT, MASK4_BT, "prompt_mean", group_ids_B=GROUPS4_B).item()
    assert got == pytest.approx((3.6 + 28 / 3) / 2)
    assert reduce_loss(LOSS4_BT, MASK4_BT, "token_mean").item() == pytest.approx(46 / 8)  # not the same
    with pytest.raises(ConfigError, match="group_ids_B"):
        reduce_loss(LOSS4_BT, MASK4_BT, "prompt_mean")


def test_equal_lengths_make_the_means_agree():
    # 4 sequences of 3 trained tokens in 2 groups of 2: every mean is the token mean (78 / 12),
    # the sequence-sum is 3 times it, Dr. GRPO's with constant 6 half of it
    ones_BT = torch.ones(4, 3)
    expect = 78 / 12
    for mode in ("token_mean", "seq_mean_token_mean", "prompt_mean"):
        assert reduce_loss(LOSS4_BT, ones_BT, mode, group_ids_B=GROUPS4_B).item() == pytest.approx(expect)
    assert reduce_loss(LOSS4_BT, ones_BT, "seq_mean_token_sum").item() == pytest.approx(3 * expect)
    got = reduce_loss(LOSS4_BT, ones_BT, "seq_mean_token_sum_norm", norm_constant=6).item()
    assert got == pytest.approx(expect / 2)


@pytest.mark.parametrize("mode", list(LossReduction))
def test_reduction_weights_split_into_parts_sum_to_the_whole(mode):
    # weights from the whole batch, applied to any split of its rows, add up to the whole loss
    w_B = reduction_weights(MASK4_BT, mode, group_ids_B=GROUPS4_B, norm_constant=5)
    whole = reduce_loss(LOSS4_BT, MASK4_BT, mode, group_ids_B=GROUPS4_B, norm_constant=5)
    parts = sum(
        reduce_loss(LOSS4_BT[sl], MASK4_BT[sl], weights_B=w_B[sl])
        for sl in (slice(0, 1), slice(1, 3), slice(3, 4))
    )
    assert parts.item() == pytest.approx(whole.item())


def test_reduce_loss_ignores_garbage_at_masked_positions():
    garbage_BT = LOSS_BT.clone()
    garbage_BT[0, 2], garbage_BT[0, 3], garbage_BT[1, 3] = NAN, INF, -INF
    groups_B = torch.tensor([0, 1])
    for mode in LossReduction:
        got = reduce_loss(garbage_BT, MASK_BT, mode, group_ids_B=groups_B).item()
        assert got == reduce_loss(LOSS_BT, MASK_BT, mode, group_ids_B=groups_B).item()


def test_reduce_loss_rejects_unknown_modes_and_shapes():
    with pytest.raises(ConfigError, match="Did you mean 'token_mean'"):
        reduce_loss(LOSS_BT, MASK_BT, "token_men")
    with pytest.raises(ConfigError, match="shape"):
        reduce_loss(LOSS_BT, MASK_BT[:, :3])


# ---------------------------------------------------------------- PPO clip

# Ratios are set through old_logprobs = 0 and logprobs = log(ratio).
# eps_low = 0.2, eps_high = 0.28 (clip-higher): the ratio is clipped to [0.8, 1.28].
#   seq 0 t0: r = 1.5, A = +1: max(-1.5, -1.28) = -1.28   clipped high, gradient 0
#   seq 0 t1: r = 0.5, A = -1: max(0.5, 0.8)   = 0.8     clipped low, gradient 0
#   seq 0 t2: r = 1.1, A = +2: max(-2.2, -2.2) = -2.2    inside, d/dlogp(-A r) = -A r = -2.2
#   seq 0 t3: r = 0.5, A = +1: max(-0.5, -0.8) = -0.5    unclipped side, gradient -0.5
#   seq 1 t0: r = 4.0, A = -1: max(4, 1.28)    = 4       gradient -A r = 4 (dual clip: min(4, 3) = 3, grad 0)
#   seq 1 t1: r = 2.0, A = -1: max(2, 1.28)    = 2       gradient 2 (below the dual bound 3)
#   seq 1 t2, t3: masked out, filled with garbage
RATIOS_BT = [[1.5, 0.5, 1.1, 0.5], [4.0, 2.0, 1.0, 1.0]]
ADV_BT = [[1.0, -1.0, 2.0, 1.0], [-1.0, -1.0, NAN, INF]]
PPO_MASK_BT = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])


def _ppo_inputs():
    logp_BT = torch.log(torch.tensor(RATIOS_BT))
    logp_BT[1, 2], logp_BT[1, 3] = NAN, -INF
    logp_BT.requires_grad_(True)
    old_BT = torch.zeros(2, 4)
    old_BT[1, 3] = INF
    return logp_BT, old_BT, torch.tensor(ADV_BT)


def test_ppo_clip_higher_by_hand():
    logp_BT, old_BT, adv_BT = _ppo_inputs()
    config = PolicyLossConfig(eps_low=0.2, eps_high=0.28)
    loss, stats = ppo_clip_loss(logp_BT, old_BT, adv_BT, PPO_MASK_BT, config)
    # token mean: (-1.28 + 0.8 - 2.2 - 0.5 + 4 + 2) / 6 = 2.82 / 6 = 0.47
    assert loss.item() == pytest.approx(0.47, abs=1e-6)
    loss.backward()
    expected_grad = torch.tensor([[0, 0, -2.2, -0.5], [4, 2, 0, 0]]) / 6
    torch.testing.assert_close(logp_BT.grad, expected_grad)
    assert stats.num_tokens == 6
    assert stats.clip_frac_low == pytest.approx(1 / 6)
    assert stats.clip_frac_high == pytest.approx(1 / 6)
    assert stats.dual_clip_frac == 0.0
    # ratios 1.5, 0.5, 1.1, 0.5, 4, 2: mean 9.6 / 6 = 1.6
    assert stats.ratio_mean == pytest.approx(1.6, abs=1e-6)
    assert (stats.ratio_min, stats.ratio_max) == (pytest.approx(0.5), pytest.approx(4.0))
    # approx KL is the mean of k3 = r - 1 - log r over the six ratios
    k3 = [r - 1 - math.log(r) for r in (1.5, 0.5, 1.1, 0.5, 4.0, 2.0)]
    assert stats.approx_kl == pytest.approx(sum(k3) / 6, abs=1e-6)
    assert stats.loss == pytest.approx(0.47, abs=1e-6)
    assert all(isinstance(v, float | int) or v is None for v in stats.as_dict().values())


def test_ppo_dual_clip_by_hand():
    logp_BT, old_BT, adv_BT = _ppo_inputs()
    config = PolicyLossConfig(eps_low=0.2, eps_high=0.28, dual_clip_c=3.0)
    loss, stats = ppo_clip_loss(logp_BT, old_BT, adv_BT, PPO_MASK_BT, config)
    # seq 1 t0 is bounded by -c * A = 3: (-1.28 + 0.8 - 2.2 - 0.5 + 3 + 2) / 6 = 1.82 / 6
    assert loss.item() == pytest.approx(1.82 / 6, abs=1e-6)
    loss.backward()
    torch.testing.assert_close(logp_BT.grad, torch.tensor([[0, 0, -2.2, -0.5], [0, 2, 0, 0]]) / 6)
    assert stats.dual_clip_frac == pytest.approx(1 / 6)


@settings(max_examples=60, deadline=None)
@given(
    log_ratio=st.floats(-3, 3),
    adv=st.floats(-5, -1e-3),
    c=st.floats(1.5, 5),
)
def test_dual_clip_bounds_the_loss_of_negative_advantages(log_ratio, adv, c):
    loss, _ = ppo_clip_loss(
        torch.tensor([[log_ratio]]),
        torch.zeros(1, 1),
        torch.tensor([[adv]]),
        torch.ones(1, 1),
        PolicyLossConfig(dual_clip_c=c),
    )
    assert loss.item() <= -c * adv * (1 + 1e-5)


def test_clip_removes_the_gradient_of_exactly_the_clipped_tokens():
    torch.manual_seed(0)
    B, T = 3, 4
    logp_BT = (torch.randn(B, T) * 0.4).requires_grad_(True)
    old_BT = torch.zeros(B, T)
    adv_BT = torch.randn(B, T)
    config = PolicyLossConfig(eps_low=0.2, eps_high=0.28)
    loss, stats = ppo_clip_loss(logp_BT, old_BT, adv_BT, torch.ones(B, T), config)
    loss.backward()
    ratio_BT = logp_BT.detach().exp()
    clipped_BT = ((adv_BT > 0) & (ratio_BT > 1.28)) | ((adv_BT < 0) & (ratio_BT < 0.8))
    assert clipped_BT.any() and (~clipped_BT).any(), "the random draw should hit both cases"
    assert torch.all(logp_BT.grad[clipped_BT] == 0)
    # elsewhere the gradient is the importance-sampling one: -A * r / N
    torch.testing.assert_close(logp_BT.grad[~clipped_BT], (-adv_BT * ratio_BT / (B * T))[~clipped_BT])
    assert stats.clip_frac_low + stats.clip_frac_high == pytest.approx(clipped_BT.float().mean().item())


@pytest.mark.parametrize("name", list(PolicyLossType))
def test_every_loss_is_the_policy_gradient_when_on_policy(name):
    # ratio = 1 (logprobs == old_logprobs): nothing is clipped and every loss's gradient is
    # REINFORCE's: d/dlogp of -A * logp, token-averaged.
    torch.manual_seed(1)
    mask_BT = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1], [1, 1, 0, 0]])
    logp_BT = (torch.randn(3, 4) - 1).requires_grad_(True)
    adv_BT = torch.randn(3, 4)
    loss, stats = policy_loss(name, logp_BT, logp_BT.detach(), adv_BT, mask_BT)
    (grad,) = torch.autograd.grad(loss, logp_BT)
    pg_logp_BT = logp_BT.detach().clone().requires_grad_(True)
    pg_loss = reduce_loss(-adv_BT * pg_logp_BT, mask_BT, "token_mean")
    (pg_grad,) = torch.autograd.grad(pg_loss, pg_logp_BT)
    torch.testing.assert_close(grad, pg_grad)
    assert stats.clip_frac_low == stats.clip_frac_high == 0.0
    assert stats.ratio_mean == pytest.approx(1.0) and stats.approx_kl == pytest.approx(0.0, abs=1e-7)
    if name not in (PolicyLossType.CISPO, PolicyLossType.DRO):  # theirs is -A * logp, the others' -A * r = -A
        assert loss.item() == pytest.approx(reduce_loss(-adv_BT, mask_BT).item(), abs=1e-6)


@pytest.mark.parametrize("name", list(PolicyLossType))
def test_masked_tokens_contribute_nothing(name):
    # Same batch twice: once with garbage (nan, inf) at the masked positions, once cropped to the
    # trained tokens only. Loss and gradient must agree, and masked gradients must be exactly 0.
    torch.manual_seed(2)
    mask_BT = torch.tensor([[1, 1, 0], [1, 1, 0]])
    logp_BT = torch.randn(2, 3) * 0.3 - 1
    old_BT = logp_BT + torch.randn(2, 3) * 0.1
    adv_BT = torch.randn(2, 3)
    rollout_BT = old_BT + torch.randn(2, 3) * 0.1
    for t in (logp_BT, old_BT, adv_BT, rollout_BT):
        t[:, 2] = torch.tensor([NAN, INF])
    config = PolicyLossConfig(truncated_is=True, dual_clip_c=3.0, reduction="seq_mean_token_mean")
    full = logp_BT.clone().requires_grad_(True)
    loss, _ = policy_loss(name, full, old_BT, adv_BT, mask_BT, config, rollout_logprobs_BT=rollout_BT)
    loss.backward()
    crop = logp_BT[:, :2].clone().requires_grad_(True)
    ref_loss, _ = policy_loss(
        name,
        crop,
        old_BT[:, :2],
        adv_BT[:, :2],
        mask_BT[:, :2],
        config,
        rollout_logprobs_BT=rollout_BT[:, :2],
    )
    ref_loss.backward()
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(full.grad[:, :2], crop.grad)
    assert torch.all(full.grad[:, 2] == 0)


# ---------------------------------------------------------------- GSPO


def test_gspo_by_hand():
    # seq 0: token log-ratios 0.2, -0.1 (third token masked): mean 0.05, s = exp(0.05) = 1.051271
    #        A = +1 and s > 1 + 4e-4: clipped high, loss -1.0004 on each token, gradient 0.
    # seq 1: log-ratios 1e-4, -1e-4, 3e-4: mean 1e-4, s = exp(1e-4) = 1.000100005, inside
    #        [0.9997, 1.0004]; A = -2: loss -A s = 2.00020001 on each token, and the token
    #        gradient is -A * s = 2.0002 (GSPO-token: value s, gradient s * dlogp_t).
    # seq_mean_token_mean: (-1.0004 + 2.0002) / 2 = 0.4999; gradient of seq 1: 2.0002 / 3 / 2.
    old_BT = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]], dtype=torch.float64)
    delta_BT = torch.tensor([[0.2, -0.1, 5.0], [1e-4, -1e-4, 3e-4]], dtype=torch.float64)
    logp_BT = (old_BT + delta_BT).requires_grad_(True)
    adv_BT = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]], dtype=torch.float64)
    mask_BT = torch.tensor([[1, 1, 0], [1, 1, 1]])
    config = PolicyLossConfig(reduction="seq_mean_token_mean")
    loss, stats = gspo_loss(logp_BT, old_BT, adv_BT, mask_BT, config)
    s1 = math.exp(1e-4)
    assert loss.item() == pytest.approx((-1.0004 + 2 * s1) / 2, abs=1e-9)
    loss.backward()
    expected = torch.tensor([[0, 0, 0], [2 * s1 / 6] * 3], dtype=torch.float64)
    torch.testing.assert_close(logp_BT.grad, expected)
    assert stats.clip_frac_high == pytest.approx(2 / 5)  # the two tokens of sequence 0
    assert stats.ratio_max == pytest.approx(math.exp(0.05))


def test_gspo_equals_the_sequence_level_objective():
    # GSPO written directly with one ratio per sequence, s_i = exp(mean_t log-ratio), and
    # loss_i = max(-A_i s_i, -A_i clip(s_i)), averaged over sequences.
    torch.manual_seed(3)
    B, T = 4, 5
    mask_BT = torch.ones(B, T)
    mask_BT[0, 3:] = 0
    mask_BT[2, 0] = 0
    old_BT = torch.randn(B, T) - 2
    logp_BT = (old_BT + torch.randn(B, T) * 0.2).requires_grad_(True)
    adv_B = torch.tensor([1.0, -1.0, 0.5, -0.5])
    config = PolicyLossConfig(gspo_eps_low=0.05, gspo_eps_high=0.05, reduction="seq_mean_token_mean")
    loss, _ = gspo_loss(logp_BT, old_BT, adv_B[:, None].expand(B, T), mask_BT, config)
    (grad,) = torch.autograd.grad(loss, logp_BT)
    logp2 = logp_BT.detach().clone().requires_grad_(True)
    s_B = (((logp2 - old_BT) * mask_BT).sum(1) / mask_BT.sum(1)).exp()
    seq_loss_B = torch.maximum(-adv_B * s_B, -adv_B * s_B.clamp(0.95, 1.05))
    ref = seq_loss_B.mean()
    (ref_grad,) = torch.autograd.grad(ref, logp2)
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(grad, ref_grad)
    assert (s_B.detach() - 1).abs().max() > 0.05, "the draw should clip at least one sequence"


# ---------------------------------------------------------------- CISPO, IS, TIS

# logprobs [-1, -2], old [-1.5, -1]: ratios exp(0.5) = 1.648721 and exp(-1) = 0.367879; A = [1, -1]
CISPO_LOGP = [[-1.0, -2.0]]
CISPO_OLD = torch.tensor([[-1.5, -1.0]])
CISPO_ADV = torch.tensor([[1.0, -1.0]])


def test_cispo_by_hand():
    logp_BT = leaf(CISPO_LOGP)
    loss, stats = cispo_loss(
        logp_BT, CISPO_OLD, CISPO_ADV, torch.ones(1, 2), PolicyLossConfig(cispo_eps_high=0.28)
    )
    # weights: clip(1.648721, 0, 1.28) = 1.28; clip(0.367879, 0, 1.28) = 0.367879 (no lower bound)
    # loss = -w A logp: t0 = -1.28 * 1 * -1 = 1.28; t1 = -0.367879 * -1 * -2 = -0.735759
    # token mean (1.28 - 0.735759) / 2 = 0.272121; gradient -w A / 2 = -0.64 and 0.183940
    assert loss.item() == pytest.approx(0.272121, abs=1e-6)
    loss.backward()
    torch.testing.assert_close(logp_BT.grad, torch.tensor([[-0.64, 0.183940]]))
    assert stats.clip_frac_high == 0.5 and stats.clip_frac_low == 0.0
    # unlike PPO, the token above the clip still has a gradient


def test_importance_sampling_by_hand():
    logp_BT = leaf(CISPO_LOGP)
    loss, stats = importance_sampling_loss(logp_BT, CISPO_OLD, CISPO_ADV, torch.ones(1, 2))
    # -r A: -1.648721 and +0.367879; mean -0.640421; gradient -A r / 2: -0.824361, 0.183940
    assert loss.item() == pytest.approx(-0.640421, abs=1e-6)
    loss.backward()
    torch.testing.assert_close(logp_BT.grad, torch.tensor([[-0.824361, 0.183940]]))
    assert stats.clip_frac_high == stats.clip_frac_low == 0.0


def test_truncated_importance_sampling_by_hand():
    # on-policy for the trainer (logp = old = 0, r = 1, A = 1), but the inference engine reported
    # rollout logprobs [-1, 0.5]: weights min(exp(0 - -1), 2) = min(2.718, 2) = 2 and
    # exp(0 - 0.5) = 0.606531. loss = -A * r * w: mean (-2 - 0.606531) / 2 = -1.303265.
    logp_BT = leaf([[0.0, 0.0]])
    rollout_BT = torch.tensor([[-1.0, 0.5]])
    config = PolicyLossConfig(truncated_is=True, tis_cap=2.0)
    loss, stats = ppo_clip_loss(
        logp_BT, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), config, rollout_logprobs_BT=rollout_BT
    )
    assert loss.item() == pytest.approx(-1.303265, abs=1e-6)
    loss.backward()
    torch.testing.assert_close(logp_BT.grad, torch.tensor([[-1.0, -0.303265]]))
    assert stats.tis_capped_frac == 0.5
    assert stats.tis_weight_mean == pytest.approx(1.303265, abs=1e-6)
    # rollout KL, k3 with log-ratios old - rollout = [1, -0.5]:
    # (e - 1 - 1) = 0.718282 and (exp(-0.5) - 1 + 0.5) = 0.106531; mean 0.412406
    assert stats.rollout_kl == pytest.approx(0.412406, abs=1e-6)
    # without truncated_is the rollout logprobs only feed the mismatch stat
    loss_off, stats_off = ppo_clip_loss(
        logp_BT, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), rollout_logprobs_BT=rollout_BT
    )
    assert loss_off.item() == pytest.approx(-1.0)
    assert stats_off.rollout_kl == pytest.approx(0.412406, abs=1e-6) and stats_off.tis_weight_mean == 1.0


def test_truncated_is_needs_rollout_logprobs():
    with pytest.raises(ConfigError, match="rollout_logprobs_BT"):
        policy_loss("ppo_clip", leaf([[0.0]]), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1),
                    PolicyLossConfig(truncated_is=True))  # fmt: skip


def test_policy_loss_dispatch_and_errors():
    args = (leaf(CISPO_LOGP), CISPO_OLD, CISPO_ADV, torch.ones(1, 2))
    for name, fn in [("ppo_clip", ppo_clip_loss), ("gspo", gspo_loss), ("cispo", cispo_loss),
                     ("importance_sampling", importance_sampling_loss)]:  # fmt: skip
        assert policy_loss(name, *args)[0].item() == fn(*args)[0].item()
    with pytest.raises(ConfigError, match="Did you mean 'gspo'"):
        policy_loss("gpso", *args)
    with pytest.raises(ConfigError, match="old_logprobs_BT has shape"):
        policy_loss("ppo_clip", leaf(CISPO_LOGP), torch.zeros(2, 2), CISPO_ADV, torch.ones(1, 2))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"eps_low": 1.0}, "eps_low must be < 1"),
        ({"eps_high": -0.1}, "eps_high must be >= 0"),
        ({"dual_clip_c": 1.0}, "dual_clip_c must be > 1"),
        ({"tis_cap": 0.0}, "tis_cap"),
        ({"cispo_eps_low": 2.0}, "cispo_eps_low"),
        ({"norm_constant": 0}, "norm_constant"),
        ({"reduction": "mean"}, "unknown LossReduction"),
    ],
)
def test_policy_loss_config_validates(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        PolicyLossConfig(**kwargs)


# ---------------------------------------------------------------- entropy bonus


def test_entropy_bonus_loss_rewards_entropy():
    entropy_BT = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]])
    mask_BT = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss, stats = entropy_bonus_loss(entropy_BT, mask_BT, coef=0.01)
    # token mean over (1, 2, 3) = 2; loss = -0.01 * 2 = -0.02
    assert loss.item() == pytest.approx(-0.02)
    assert stats.entropy_mean == pytest.approx(2.0) and stats.loss == pytest.approx(-0.02)


@pytest.mark.parametrize("name", list(PolicyLossType))
def test_a_batch_without_trained_tokens_gives_zero_loss_and_finite_stats(name):
    logp_BT = leaf([[-1.0, -2.0], [-0.5, -0.1]])
    loss, stats = policy_loss(name, logp_BT, torch.zeros(2, 2), torch.ones(2, 2), torch.zeros(2, 2))
    loss.backward()
    assert loss.item() == 0.0 and torch.all(logp_BT.grad == 0)
    assert stats.num_tokens == 0
    assert (stats.ratio_mean, stats.ratio_max, stats.ratio_min) == (1.0, 1.0, 1.0)
    assert all(math.isfinite(v) for v in stats.as_dict().values() if v is not None)


def test_dro_by_hand():
    # per token -(lp * A) + 0.5 * beta * (lp - old)^2, token mean over the 3 trained tokens
    logp_BT = leaf([[-1.0, -2.0, -0.5]])
    old_BT = torch.tensor([[-1.0, -1.5, -1.0]])
    adv_BT = torch.tensor([[1.0, -1.0, 2.0]])
    mask_BT = torch.ones(1, 3)
    loss, stats = dro_loss(logp_BT, old_BT, adv_BT, mask_BT, PolicyLossConfig(dro_beta=0.5))
    per_token = [1.0 + 0.0, -2.0 + 0.25 * 0.25, 1.0 + 0.25 * 0.25]
    assert loss.item() == pytest.approx(sum(per_token) / 3)
    loss.backward()
    # gradient per token (-A + beta * (lp - old)) / 3
    assert logp_BT.grad.tolist()[0] == pytest.approx([(-1.0) / 3, (1.0 - 0.25) / 3, (-2.0 + 0.25) / 3])
    assert policy_loss("dro", logp_BT, old_BT, adv_BT, mask_BT, PolicyLossConfig(dro_beta=0.5))[
        0
    ].item() == pytest.approx(loss.item())
    with pytest.raises(ConfigError, match="dro_beta"):
        PolicyLossConfig(dro_beta=-1.0)
