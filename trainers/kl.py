"""KL divergence to a frozen reference model: estimators, the KL loss term and KL-in-reward.

Follows J. Schulman, "Approximating KL Divergence" (2020). On tokens sampled from the policy
``p``, with ``q`` the reference model and ``log r = log q - log p`` per token:

- ``k1 = -log r = log(p/q)``
- ``k2 = (log r)^2 / 2``
- ``k3 = (r - 1) - log r``

each estimates ``KL(p || q)``. Used *as a loss* their gradients differ (on-policy, in
expectation): k1's is zero (``E_p[grad log p] = 0``), k2's is ``grad KL(p || q)`` and k3's is
``grad KL(q || p)`` (Tang and Munos 2025, "On a few pitfalls in KL divergence gradient estimation
for RL"). GRPO (DeepSeekMath) puts k3 in the loss; InstructGPT and REINFORCE++ subtract k1 from
the token rewards instead (:func:`kl_penalized_rewards`), where the estimator's value, not its
gradient, matters.

Layout as in :mod:`trainers.losses`: ``B x T`` tensors with ``mask_BT`` = 1 on trained tokens.
"""

from __future__ import annotations

import torch

from trainers._masked import as_mask, check_shape, masked_mean
from trainers.losses import reduce_loss
from trainers.types import KLConfig, KLEstimator, KLStats, LossReduction, parse_choice

__all__ = ["kl_estimate", "kl_loss", "kl_penalized_rewards"]


def kl_estimate(
    logprobs_BT: torch.Tensor,
    ref_logprobs_BT: torch.Tensor,
    estimator: KLEstimator | str = KLEstimator.K3,
    *,
    clamp: float | None = None,
) -> torch.Tensor:
    """Per-token estimate of ``KL(policy || reference)``, shape ``B x T``.

    ``logprobs_BT`` (policy, may carry gradient) and ``ref_logprobs_BT`` (reference, detached)
    are the log-probabilities of the sampled tokens. ``clamp`` bounds each value to
    ``[-clamp, clamp]``. Values at masked-out positions are meaningless; mask them downstream.
    """
    check_shape("ref_logprobs_BT", ref_logprobs_BT, tuple(logprobs_BT.shape))
    kind = parse_choice(KLEstimator, estimator)
    log_r_BT = ref_logprobs_BT.detach().to(logprobs_BT.dtype) - logprobs_BT  # B x T, log(q/p)
    match kind:
        case KLEstimator.K1:
            kl_BT = -log_r_BT  # B x T
        case KLEstimator.K2:
            kl_BT = 0.5 * log_r_BT.square()  # B x T
        case KLEstimator.K3:
            kl_BT = torch.expm1(log_r_BT) - log_r_BT  # B x T, (r - 1) - log r
        case _:
            raise ValueError(f"unknown KL estimator {estimator!r}")
    if clamp is not None:
        kl_BT = kl_BT.clamp(-clamp, clamp)
    return kl_BT


def kl_loss(
    logprobs_BT: torch.Tensor,
    ref_logprobs_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    config: KLConfig,
    reduction: LossReduction | str = LossReduction.TOKEN_MEAN,
    *,
    norm_constant: float | None = None,
    weights_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, KLStats]:
    """The KL term to add to the policy loss: ``config.coef * reduce(kl_BT)``.

    Use the same ``reduction`` (or ``weights_B``) as the policy loss so both terms weigh tokens alike. Positions with
    ``mask_BT`` 0 contribute nothing, also to the gradient (their inputs are zeroed first).
    """
    check_shape("mask_BT", mask_BT, tuple(logprobs_BT.shape))
    m_BT = as_mask(mask_BT, logprobs_BT)  # B x T
    zeros_BT = torch.zeros_like(logprobs_BT)
    logp_BT = torch.where(m_BT > 0, logprobs_BT, zeros_BT)  # B x T
    ref_BT = torch.where(m_BT > 0, ref_logprobs_BT.to(logprobs_BT.dtype), zeros_BT)  # B x T
    kl_BT = kl_estimate(logp_BT, ref_BT, config.estimator, clamp=config.clamp)  # B x T
    loss = config.coef * reduce_loss(kl_BT, m_BT, reduction, norm_constant=norm_constant, weights_B=weights_B)
    with torch.no_grad():
        selected = kl_BT.detach()[m_BT > 0]
        stats = KLStats(
            kl_mean=masked_mean(kl_BT.detach(), m_BT).item(),
            kl_max=selected.max().item() if selected.numel() else 0.0,
            loss=loss.item(),
        )
    return loss, stats


def kl_penalized_rewards(
    token_rewards_BT: torch.Tensor, kl_BT: torch.Tensor, mask_BT: torch.Tensor, coef: float
) -> torch.Tensor:
    """``token_rewards_BT - coef * kl_BT`` on trained tokens (KL in the reward), detached.

    Every trained token pays its own KL; the task rewards stay where they were (at each turn's
    last generated token). Feed the result to a token-level estimator (REINFORCE++, GAE)."""
    check_shape("kl_BT", kl_BT, tuple(token_rewards_BT.shape))
    check_shape("mask_BT", mask_BT, tuple(token_rewards_BT.shape))
    m_BT = as_mask(mask_BT, token_rewards_BT)  # B x T
    kl_safe_BT = torch.where(m_BT > 0, kl_BT.detach().to(m_BT.dtype), torch.zeros_like(m_BT))  # B x T
    return token_rewards_BT.detach() - coef * kl_safe_BT  # B x T
