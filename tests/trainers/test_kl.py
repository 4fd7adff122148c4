"""KL estimators, the KL loss and KL-in-reward against hand-worked values and exact KLs."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from skyrl_gym.errors import ConfigError
from trainers import KLConfig, KLEstimator, kl_estimate, kl_loss, kl_penalized_rewards

# policy logprobs [-1, -2], reference [-1.5, -1]: log r = log q - log p = [-0.5, 1]
LOGP_BT = torch.tensor([[-1.0, -2.0]])
REF_BT = torch.tensor([[-1.5, -1.0]])


def test_estimators_by_hand():
    # k1 = -log r = [0.5, -1]
    torch.testing.assert_close(kl_estimate(LOGP_BT, REF_BT, "k1"), torch.tensor([[0.5, -1.0]]))
    # k2 = (log r)^2 / 2 = [0.125, 0.5]
    torch.testing.assert_close(kl_estimate(LOGP_BT, REF_BT, "k2"), torch.tensor([[0.125, 0.5]]))
    # k3 = r - 1 - log r = [exp(-0.5) - 1 + 0.5, e - 1 - 1] = [0.106531, 0.718282]
    torch.testing.assert_close(
        kl_estimate(LOGP_BT, REF_BT, KLEstimator.K3), torch.tensor([[0.106531, 0.718282]])
    )
    # clamping bounds each value
    torch.testing.assert_close(kl_estimate(LOGP_BT, REF_BT, "k3", clamp=0.5), torch.tensor([[0.106531, 0.5]]))
    with pytest.raises(ConfigError, match=r"unknown KLEstimator 'k4'; choose one of \['k1'"):
        kl_estimate(LOGP_BT, REF_BT, "k4")


@settings(max_examples=60, deadline=None)
@given(logp=st.floats(-20, 0), ref=st.floats(-20, 0))
def test_k2_and_k3_are_never_negative(logp, ref):
    for name in ("k2", "k3"):
        assert kl_estimate(torch.tensor([[logp]]), torch.tensor([[ref]]), name).item() >= 0


def test_k1_and_k3_are_unbiased_estimates_of_kl():
    # Sample tokens from p over 6 symbols; the mean estimate matches the exact KL(p || q).
    gen = torch.Generator().manual_seed(0)
    logp_V = torch.log_softmax(torch.randn(6, generator=gen), -1)
    logq_V = torch.log_softmax(torch.randn(6, generator=gen), -1)
    exact = (logp_V.exp() * (logp_V - logq_V)).sum().item()
    tokens = torch.multinomial(logp_V.exp(), 200_000, replacement=True, generator=gen)
    logp_BT, logq_BT = logp_V[tokens][None], logq_V[tokens][None]
    for name in ("k1", "k3"):
        assert kl_estimate(logp_BT, logq_BT, name).mean().item() == pytest.approx(exact, rel=0.03)


def test_gradients_of_the_estimators_as_losses():
    # Expected gradient on-policy, computed exactly by weighting each token with its detached
    # probability: k1 -> 0, k2 -> grad KL(p || q), k3 -> grad KL(q || p) (see trainers.kl).
    torch.manual_seed(5)
    theta_V = torch.randn(5, requires_grad=True)
    logq_V = torch.log_softmax(torch.randn(5), -1)

    def expected_grad(name):
        logp_V = torch.log_softmax(theta_V, -1)
        k_V = kl_estimate(logp_V[None], logq_V[None], name)[0]
        (g,) = torch.autograd.grad((logp_V.exp().detach() * k_V).sum(), theta_V)
        return g

    logp_V = torch.log_softmax(theta_V, -1)
    (g_reverse,) = torch.autograd.grad((logp_V.exp() * (logp_V - logq_V)).sum(), theta_V)
    logp_V = torch.log_softmax(theta_V, -1)
    (g_forward,) = torch.autograd.grad((logq_V.exp() * (logq_V - logp_V)).sum(), theta_V)
    torch.testing.assert_close(expected_grad("k1"), torch.zeros(5), atol=1e-6, rtol=0)
    torch.testing.assert_close(expected_grad("k2"), g_reverse)
    torch.testing.assert_close(expected_grad("k3"), g_forward)


def test_kl_loss_by_hand_and_masked_positions():
    logp_BT = torch.tensor([[-1.0, -2.0, float("nan")]], requires_grad=True)
    ref_BT = torch.tensor([[-1.5, -1.0, float("inf")]])
    mask_BT = torch.tensor([[1, 1, 0]])
    loss, stats = kl_loss(logp_BT, ref_BT, mask_BT, KLConfig(estimator="k3", coef=0.1))
    # 0.1 * mean(0.106531, 0.718282) = 0.1 * 0.412406 = 0.0412406
    assert loss.item() == pytest.approx(0.0412406, abs=1e-6)
    assert stats.kl_mean == pytest.approx(0.412406, abs=1e-6)
    assert stats.kl_max == pytest.approx(0.718282, abs=1e-6)
    loss.backward()
    # d k3 / d logp = 1 - r: 1 - exp(-0.5) = 0.393469 and 1 - e = -1.718282; times 0.1 / 2 tokens
    torch.testing.assert_close(logp_BT.grad, torch.tensor([[0.0196735, -0.0859141, 0.0]]))


def test_kl_penalized_rewards_by_hand():
    rewards_BT = torch.tensor([[0.0, 1.0, 0.0]])
    kl_BT = torch.tensor([[0.5, -1.0, 7.0]], requires_grad=True)
    out = kl_penalized_rewards(rewards_BT, kl_BT, torch.tensor([[1, 1, 0]]), coef=0.1)
    # [0 - 0.05, 1 + 0.1, unchanged 0 at the masked position]
    torch.testing.assert_close(out, torch.tensor([[-0.05, 1.1, 0.0]]))
    assert not out.requires_grad


def test_kl_config_validates():
    assert KLConfig(estimator="k2").estimator is KLEstimator.K2
    with pytest.raises(ConfigError, match="coef"):
        KLConfig(coef=-1)
    with pytest.raises(ConfigError, match="unknown KLEstimator"):
        KLConfig(estimator="kl")
    assert math.isfinite(KLConfig(clamp=10).clamp)
