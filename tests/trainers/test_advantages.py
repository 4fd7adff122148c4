"""Advantage estimators against hand-worked values, plus their invariants."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from skyrl_gym.errors import ConfigError
from trainers import (
    AdvantageEstimator,
    compute_advantages,
    contiguous_group_ids,
    discounted_returns,
    gae_advantages,
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    turn_returns,
)

# Five sequences in two groups of different sizes (ids need not be contiguous or sorted):
# group 5 = sequences 0, 1, 2 with rewards 1, 0, 0; group 9 = sequences 3, 4 with rewards 2, 2.
REWARDS_B = torch.tensor([1.0, 0.0, 0.0, 2.0, 2.0])
GROUPS_B = torch.tensor([5, 5, 5, 9, 9])
MASK_BT = torch.tensor(
    [
        [1, 1, 1],
        [1, 1, 0],  # padding at the end
        [0, 1, 1],  # a prompt token at the start
        [1, 0, 1],  # an observation token in the middle
        [1, 1, 1],
    ]
)


def test_grpo_normalizes_by_the_unbiased_group_std_and_zeroes_equal_groups():
    out = grpo_advantages(REWARDS_B, GROUPS_B, MASK_BT)
    # group 5: mean 1/3; deviations 2/3, -1/3, -1/3; squares 4/9 + 1/9 + 1/9 = 2/3;
    # unbiased var (2/3) / (3 - 1) = 1/3; std = 0.577350.
    # A = (2/3) / 0.577350 = 1.154701 and (-1/3) / 0.577350 = -0.577350.
    # group 9: rewards all equal -> advantage exactly 0.
    a0, a1 = 1.154701, -0.577350
    expected = torch.tensor([[a0, a0, a0], [a1, a1, 0], [0, a1, a1], [0, 0, 0], [0, 0, 0]])
    torch.testing.assert_close(out.advantages_BT, expected, atol=1e-5, rtol=0)
    assert out.returns_BT is None
    assert out.stats.num_groups == 2
    assert out.stats.num_zero_adv_groups == 1
    assert out.stats.num_sequences == 5
    assert out.stats.num_tokens == 12
    assert out.stats.adv_max == pytest.approx(a0, abs=1e-5)
    assert out.stats.adv_min == pytest.approx(a1, abs=1e-5)


def test_dr_grpo_keeps_the_mean_baseline_and_drops_the_std():
    out = compute_advantages("dr_grpo", MASK_BT, rewards_B=REWARDS_B, group_ids_B=GROUPS_B)
    # group 5: r - 1/3 = 2/3, -1/3, -1/3 (no division); group 9: 0.
    a0, a1 = 2 / 3, -1 / 3
    expected = torch.tensor([[a0, a0, a0], [a1, a1, 0], [0, a1, a1], [0, 0, 0], [0, 0, 0]])
    torch.testing.assert_close(out.advantages_BT, expected, atol=1e-6, rtol=0)


def test_rloo_uses_the_mean_of_the_other_members():
    out = rloo_advantages(REWARDS_B, GROUPS_B, MASK_BT)
    # group 5: A0 = 1 - (0 + 0)/2 = 1; A1 = 0 - (1 + 0)/2 = -0.5; A2 = -0.5.
    # (= n/(n-1) * (r - mean) = 1.5 * 2/3 = 1.) group 9: 2 - 2 = 0.
    expected = torch.tensor([[1, 1, 1], [-0.5, -0.5, 0], [0, -0.5, -0.5], [0, 0, 0], [0, 0, 0.0]])
    torch.testing.assert_close(out.advantages_BT, expected)
    assert out.stats.num_zero_adv_groups == 1


def test_one_member_groups_get_zero_advantage():
    rewards_B = torch.tensor([3.0, 1.0, 0.0])
    groups_B = torch.tensor([0, 1, 1])  # group 0 has a single member
    mask_BT = torch.ones(3, 2)
    for fn in (grpo_advantages, rloo_advantages):
        out = fn(rewards_B, groups_B, mask_BT)
        assert torch.all(out.advantages_BT[0] == 0)
        assert out.stats.num_zero_adv_groups == 1
        # group 1 (rewards 1, 0): GRPO 0.5 / std(0.7071) = 0.7071; RLOO 1 - 0 = 1
        expected = 1.0 if fn is rloo_advantages else 0.5 / math.sqrt(0.5)
        assert out.advantages_BT[1, 0].item() == pytest.approx(expected, abs=1e-5)


def test_equal_rewards_that_do_not_round_exactly_still_give_zero():
    rewards_B = torch.full((3,), 0.1)  # mean of 0.1s is not exactly 0.1 in float32
    out = grpo_advantages(rewards_B, torch.zeros(3, dtype=torch.long), torch.ones(3, 2))
    assert torch.all(out.advantages_BT == 0)


def test_contiguous_group_ids_match_the_grouped_layout():
    assert contiguous_group_ids(2, 3).tolist() == [0, 0, 0, 1, 1, 1]
    rewards_GS = torch.tensor([[1.0, 0.0, 0.0], [2.0, 4.0, 0.0]])
    out = compute_advantages(
        "dr_grpo", torch.ones(6, 1), rewards_B=rewards_GS.reshape(-1), group_ids_B=contiguous_group_ids(2, 3)
    )
    expected_GS = rewards_GS - rewards_GS.mean(dim=1, keepdim=True)
    torch.testing.assert_close(out.advantages_BT[:, 0], expected_GS.reshape(-1))


@settings(max_examples=40, deadline=None)
@given(
    rewards=st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=1, max_size=12),
    data=st.data(),
)
def test_group_advantages_sum_to_zero_per_group(rewards, data):
    B = len(rewards)
    groups = data.draw(st.lists(st.integers(0, 3), min_size=B, max_size=B))
    rewards_B = torch.tensor(rewards, dtype=torch.float64)
    groups_B = torch.tensor(groups)
    for name in ("grpo", "dr_grpo", "rloo"):
        adv_B = compute_advantages(
            name, torch.ones(B, 1), rewards_B=rewards_B, group_ids_B=groups_B
        ).advantages_BT[:, 0]
        for g in groups_B.unique():
            members = groups_B == g
            assert abs(adv_B[members].sum().item()) < 1e-6 * max(1.0, adv_B.abs().max().item())


def test_discounted_returns_skip_observation_tokens():
    # mask [1, 1, 0, 1], rewards [0, 0.5, 0, 1], gamma 0.9, from the back:
    # t3: 1; t2 (observation): 0, skipped; t1: 0.5 + 0.9 * 1 = 1.4; t0: 0 + 0.9 * 1.4 = 1.26
    returns = discounted_returns(torch.tensor([[0, 0.5, 0, 1]]), torch.tensor([[1, 1, 0, 1]]), gamma=0.9)
    torch.testing.assert_close(returns, torch.tensor([[1.26, 1.4, 0, 1]]))


def test_turn_returns_discount_once_per_turn():
    token_rewards_BT = torch.tensor([[0, 0.5, 0, 1, 0, 2], [0, 0, 0, 0, 3, 0]])
    mask_BT = torch.tensor([[1, 1, 0, 1, 0, 1], [0, 0, 1, 1, 1, 0]])
    returns = turn_returns(token_rewards_BT, mask_BT, gamma=0.5)
    # sequence 0 has three turns: tokens {0,1} with reward 0.5, {3} with 1, {5} with 2.
    #   turn 2: 2; turn 1: 1 + 0.5 * 2 = 2; turn 0: 0.5 + 0.5 * 2 = 1.5
    # sequence 1 has one turn (tokens 2..4) with reward 3 after two prompt tokens.
    expected = torch.tensor([[1.5, 1.5, 0, 2, 0, 2], [0, 0, 3, 3, 3, 0]])
    torch.testing.assert_close(returns, expected)
    # gamma = 1: each turn gets the sum of the rewards from that turn on
    torch.testing.assert_close(
        turn_returns(token_rewards_BT, mask_BT, gamma=1.0)[0], torch.tensor([3.5, 3.5, 0, 3, 0, 2])
    )
    # per token instead, sequence 0 discounts inside the first turn too:
    #   t5: 2; t3: 1 + 0.5*2 = 2; t1: 0.5 + 0.5*2 = 1.5; t0: 0 + 0.5*1.5 = 0.75
    torch.testing.assert_close(
        discounted_returns(token_rewards_BT, mask_BT, gamma=0.5)[0], torch.tensor([0.75, 1.5, 0, 2, 0, 2])
    )
    # REINFORCE++ takes either unit
    for unit, expected_returns in (
        ("turn", expected),
        ("token", discounted_returns(token_rewards_BT, mask_BT, 0.5)),
    ):
        out = compute_advantages(
            "reinforce_pp", mask_BT, token_rewards_BT=token_rewards_BT, gamma=0.5, discount=unit
        )
        torch.testing.assert_close(out.returns_BT, expected_returns)
    with pytest.raises(ConfigError, match="unknown discount"):
        reinforce_pp_advantages(token_rewards_BT, mask_BT, discount="step")


def test_rewards_on_masked_positions_are_rejected():
    with pytest.raises(ConfigError, match="sequence 0, token 2"):
        discounted_returns(torch.tensor([[0, 0, 1.0]]), torch.tensor([[1, 1, 0]]))
    with pytest.raises(ConfigError, match="last generated token"):
        turn_returns(torch.tensor([[0, 0, 1.0]]), torch.tensor([[1, 1, 0]]))


def test_reinforce_pp_whitens_returns_over_the_batch():
    token_rewards_BT = torch.tensor([[0, 0, 1.0], [0, 0, 0]])
    mask_BT = torch.tensor([[1, 1, 1], [1, 1, 0]])
    out = reinforce_pp_advantages(token_rewards_BT, mask_BT, gamma=1.0)
    # returns: [1, 1, 1] and [0, 0, -]; over the 5 trained tokens mean 3/5 = 0.6,
    # deviations 0.4 (x3) and -0.6 (x2); squares 3*0.16 + 2*0.36 = 1.2; unbiased var 1.2/4 = 0.3;
    # std 0.547723; whitened 0.4/0.547723 = 0.730297 and -0.6/0.547723 = -1.095445
    torch.testing.assert_close(out.returns_BT, torch.tensor([[1, 1, 1], [0, 0, 0.0]]))
    hi, lo = 0.730297, -1.095445
    torch.testing.assert_close(
        out.advantages_BT, torch.tensor([[hi, hi, hi], [lo, lo, 0]]), atol=1e-5, rtol=0
    )
    assert out.stats.adv_mean == pytest.approx(0.0, abs=1e-6)
    assert out.stats.returns_mean == pytest.approx(0.6)


def test_reinforce_pp_with_kl_in_the_reward():
    token_rewards_BT = torch.tensor([[0, 0, 1.0], [0, 0, 0]])
    mask_BT = torch.tensor([[1, 1, 1], [1, 1, 0]])
    kl_BT = torch.full((2, 3), 0.1)
    out = compute_advantages(
        "reinforce_pp", mask_BT, token_rewards_BT=token_rewards_BT, kl_BT=kl_BT, kl_coef=1.0
    )
    # rewards - 1.0 * 0.1 on trained tokens: [-0.1, -0.1, 0.9] and [-0.1, -0.1, -];
    # returns (gamma 1): 0.7, 0.8, 0.9 and -0.2, -0.1
    torch.testing.assert_close(out.returns_BT, torch.tensor([[0.7, 0.8, 0.9], [-0.2, -0.1, 0]]))


def test_gae_by_hand_with_an_observation_and_a_prompt_token():
    token_rewards_BT = torch.tensor([[0, 0, 0, 1.0], [0, 0, 2, 0]])
    values_BT = torch.tensor([[0.5, 0.6, 9.0, 0.8], [7.0, 1.0, 1.5, 7.0]])  # 9 and 7 are masked out
    mask_BT = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 0]])
    out = gae_advantages(token_rewards_BT, values_BT, mask_BT, gamma=0.9, lam=0.5)
    # sequence 0, gamma*lam = 0.45:
    #   t3: delta = 1 + 0.9*0 - 0.8 = 0.2;            A = 0.2
    #   t2: observation, skipped (its value 9 is never used)
    #   t1: delta = 0 + 0.9*0.8 - 0.6 = 0.12;         A = 0.12 + 0.45*0.2 = 0.21
    #   t0: delta = 0 + 0.9*0.6 - 0.5 = 0.04;         A = 0.04 + 0.45*0.21 = 0.1345
    # sequence 1:
    #   t2: delta = 2 - 1.5 = 0.5;                    A = 0.5
    #   t1: delta = 0.9*1.5 - 1 = 0.35;               A = 0.35 + 0.45*0.5 = 0.575
    expected_adv = torch.tensor([[0.1345, 0.21, 0, 0.2], [0, 0.575, 0.5, 0]])
    torch.testing.assert_close(out.advantages_BT, expected_adv)
    # returns = A + V on trained tokens
    torch.testing.assert_close(out.returns_BT, torch.tensor([[0.6345, 0.81, 0, 1.0], [0, 1.575, 2.0, 0]]))


def test_gae_limits_monte_carlo_and_td():
    torch.manual_seed(0)
    mask_BT = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 1, 1, 0]])
    token_rewards_BT = torch.randn(2, 5) * mask_BT
    values_BT = torch.randn(2, 5)
    # gamma = lam = 1: A = (sum of future rewards) - V, returns = sum of future rewards
    out = gae_advantages(token_rewards_BT, values_BT, mask_BT, gamma=1.0, lam=1.0)
    mc_BT = discounted_returns(token_rewards_BT, mask_BT, gamma=1.0)
    torch.testing.assert_close(out.returns_BT, mc_BT)
    torch.testing.assert_close(out.advantages_BT, (mc_BT - values_BT) * mask_BT)
    # lam = 0: A is the one-step TD error to the next trained token
    out0 = gae_advantages(token_rewards_BT, values_BT, mask_BT, gamma=0.9, lam=0.0)
    r, v = token_rewards_BT, values_BT
    td_0 = r[0, 1] + 0.9 * v[0, 3] - v[0, 1]  # token 1 bootstraps from token 3, past the observation
    torch.testing.assert_close(out0.advantages_BT[0, 1], td_0)
    torch.testing.assert_close(out0.advantages_BT[1, 3], r[1, 3] - v[1, 3])  # last token: terminal


def test_compute_advantages_dispatches_to_each_estimator():
    mask_BT = torch.tensor([[1, 1, 0], [1, 1, 1]])
    rewards_B = torch.tensor([1.0, 0.0])
    groups_B = torch.tensor([0, 0])
    token_rewards_BT = torch.tensor([[0, 1.0, 0], [0, 0, 0]])
    values_BT = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    pairs = {
        AdvantageEstimator.GRPO: grpo_advantages(rewards_B, groups_B, mask_BT),
        AdvantageEstimator.DR_GRPO: grpo_advantages(rewards_B, groups_B, mask_BT, normalize_std=False),
        AdvantageEstimator.RLOO: rloo_advantages(rewards_B, groups_B, mask_BT),
        AdvantageEstimator.REINFORCE_PP: reinforce_pp_advantages(token_rewards_BT, mask_BT),
        AdvantageEstimator.GAE: gae_advantages(token_rewards_BT, values_BT, mask_BT),
    }
    for name, direct in pairs.items():
        got = compute_advantages(
            name.value,
            mask_BT,
            rewards_B=rewards_B,
            group_ids_B=groups_B,
            token_rewards_BT=token_rewards_BT,
            values_BT=values_BT,
        )
        torch.testing.assert_close(got.advantages_BT, direct.advantages_BT)
    # the group estimators can take the sequence reward as the sum of the token rewards
    from_tokens = compute_advantages("grpo", mask_BT, token_rewards_BT=token_rewards_BT, group_ids_B=groups_B)
    torch.testing.assert_close(from_tokens.advantages_BT, pairs[AdvantageEstimator.GRPO].advantages_BT)


def test_compute_advantages_explains_bad_calls():
    mask_BT = torch.ones(2, 2)
    with pytest.raises(ConfigError, match="Did you mean 'rloo'"):
        compute_advantages("rlo", mask_BT)
    with pytest.raises(ConfigError, match="needs group_ids_B"):
        compute_advantages("grpo", mask_BT, rewards_B=torch.zeros(2))
    with pytest.raises(ConfigError, match="needs values_BT"):
        compute_advantages("gae", mask_BT, token_rewards_BT=torch.zeros(2, 2))
    with pytest.raises(ConfigError, match="token-level estimator"):
        compute_advantages(
            "grpo", mask_BT, rewards_B=torch.zeros(2), group_ids_B=torch.zeros(2), kl_BT=mask_BT, kl_coef=0.1
        )
    with pytest.raises(ConfigError, match=r"rewards_B has shape \(3,\)"):
        grpo_advantages(torch.zeros(3), torch.zeros(3), mask_BT)


def test_advantages_carry_no_gradient():
    rewards_B = torch.tensor([1.0, 0.0], requires_grad=True)
    out = grpo_advantages(rewards_B, torch.tensor([0, 0]), torch.ones(2, 2))
    assert not out.advantages_BT.requires_grad
