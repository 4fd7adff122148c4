"""Advantage estimators and multi-turn returns, as pure functions.

Conventions:

- A batch is ``B`` sequences (responses) by ``T`` token positions. ``mask_BT`` is 1 on tokens the
  model generated itself and 0 on prompt, padding and observation tokens (tool outputs, user
  turns) in between. Only mask-1 positions carry advantages and returns; all outputs are 0
  elsewhere.
- Group estimators (GRPO, Dr. GRPO, RLOO) take one reward per sequence, ``rewards_B``, and a group
  id per sequence, ``group_ids_B`` (any integers; sequences with the same id answered the same
  prompt; groups may differ in size). For the usual ``[num_groups, group_size]`` layout use
  :func:`contiguous_group_ids`. The sequence's advantage is copied to each of its trained tokens.
- Token-level estimators (REINFORCE++, GAE) take ``token_rewards_BT``: each turn's reward sits at
  that turn's last generated token (a mask-1 position), zeros elsewhere. A nonzero reward on a
  mask-0 position is an error (it usually means the reward was put one token too far).
- Discounting skips mask-0 positions: an observation between two turns neither discounts nor
  bootstraps (see ``docs/decisions/0003-masked-positions-in-returns-and-gae.md``).
- Advantages carry no gradient (everything here runs under ``torch.no_grad``).
"""

from __future__ import annotations

from typing import Literal

import torch

from skyrl_gym.errors import ConfigError
from trainers._masked import as_mask, check_shape, masked_mean, masked_stats, masked_whiten
from trainers.kl import kl_penalized_rewards
from trainers.types import AdvantageEstimator, AdvantageOutput, AdvantageStats, parse_choice

__all__ = [
    "contiguous_group_ids",
    "grpo_advantages",
    "rloo_advantages",
    "discounted_returns",
    "turn_returns",
    "reinforce_pp_advantages",
    "gae_advantages",
    "compute_advantages",
    "episode_advantages",
]


def contiguous_group_ids(
    num_groups: int, group_size: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """Group ids for the ``[num_groups, group_size]`` layout: ``[0]*group_size + [1]*group_size + ...``."""
    if num_groups < 0 or group_size < 1:
        raise ConfigError(f"need num_groups >= 0 and group_size >= 1, got {num_groups} and {group_size}")
    return torch.arange(num_groups, device=device).repeat_interleave(group_size)  # B = G * size


def _float(x: torch.Tensor) -> torch.Tensor:
    return x.detach() if x.is_floating_point() else x.detach().float()


def _groups(
    rewards_B: torch.Tensor, group_ids_B: torch.Tensor
) -> tuple[torch.Tensor, int, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group bookkeeping: ``(index_B, G, count_G, sum_G, degenerate_G)``.

    ``index_B`` maps each sequence to ``0..G-1``; ``degenerate_G`` is True for groups whose
    rewards are all equal (one-member groups included): they carry no learning signal."""
    check_shape("group_ids_B", group_ids_B, tuple(rewards_B.shape))
    _, index_B = torch.unique(group_ids_B, return_inverse=True)  # B
    index_B = index_B.to(rewards_B.device)
    G = int(index_B.max().item()) + 1 if index_B.numel() else 0
    zeros_G = rewards_B.new_zeros(G)
    count_G = zeros_G.index_add(0, index_B, torch.ones_like(rewards_B))  # G
    sum_G = zeros_G.index_add(0, index_B, rewards_B)  # G
    max_G = zeros_G.scatter_reduce(0, index_B, rewards_B, reduce="amax", include_self=False)  # G
    min_G = zeros_G.scatter_reduce(0, index_B, rewards_B, reduce="amin", include_self=False)  # G
    return index_B, G, count_G, sum_G, max_G == min_G


def _check_sequence_inputs(rewards_B: torch.Tensor, mask_BT: torch.Tensor) -> None:
    if mask_BT.dim() != 2:
        raise ConfigError(f"mask_BT must have 2 dimensions (B x T), got shape {tuple(mask_BT.shape)}")
    check_shape("rewards_B", rewards_B, (mask_BT.shape[0],))


def _stats(
    advantages_BT: torch.Tensor,
    m_BT: torch.Tensor,
    *,
    num_groups: int = 0,
    num_zero_adv_groups: int = 0,
    returns_BT: torch.Tensor | None = None,
) -> AdvantageStats:
    mean, std, lo, hi = masked_stats(advantages_BT, m_BT)
    return AdvantageStats(
        num_sequences=int(m_BT.shape[0]),
        num_tokens=int(m_BT.sum().item()),
        num_groups=num_groups,
        num_zero_adv_groups=num_zero_adv_groups,
        adv_mean=mean,
        adv_std=std,
        adv_min=lo,
        adv_max=hi,
        returns_mean=None if returns_BT is None else masked_mean(returns_BT, m_BT).item(),
    )


@torch.no_grad()
def grpo_advantages(
    rewards_B: torch.Tensor,
    group_ids_B: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> AdvantageOutput:
    """GRPO's group-relative advantage (Shao et al. 2024, DeepSeekMath), outcome supervision.

    ``A_i = (r_i - mean_group) / (std_group + eps)`` with the unbiased (n - 1) std of the group
    (torch's default, which common GRPO implementations use). ``normalize_std=False`` is Dr.
    GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"), which drops the std division
    because it over-weights groups that are nearly all right or all wrong; pair it with the
    ``seq_mean_token_sum_norm`` loss reduction to also drop the length normalization. Groups whose rewards are all equal
    (one-member groups included) get exactly 0 and are counted in ``stats.num_zero_adv_groups``.
    Dropped: GRPO's process-supervision variant (per-step rewards).
    """
    _check_sequence_inputs(rewards_B, mask_BT)
    rewards_B = _float(rewards_B)  # B
    m_BT = as_mask(mask_BT, rewards_B)  # B x T
    index_B, G, count_G, sum_G, degenerate_G = _groups(rewards_B, group_ids_B)
    mean_G = sum_G / count_G  # G
    centered_B = rewards_B - mean_G[index_B]  # B
    if normalize_std:
        sq_G = rewards_B.new_zeros(G).index_add(0, index_B, centered_B.square())  # G
        std_G = (sq_G / (count_G - 1).clamp(min=1)).sqrt()  # G, unbiased
        adv_B = centered_B / (std_G[index_B] + eps)  # B
    else:
        adv_B = centered_B  # B
    adv_B = torch.where(degenerate_G[index_B], torch.zeros_like(adv_B), adv_B)  # B
    advantages_BT = adv_B[:, None] * m_BT  # B x T
    stats = _stats(advantages_BT, m_BT, num_groups=G, num_zero_adv_groups=int(degenerate_G.sum().item()))
    return AdvantageOutput(advantages_BT=advantages_BT, returns_BT=None, stats=stats)


@torch.no_grad()
def rloo_advantages(
    rewards_B: torch.Tensor, group_ids_B: torch.Tensor, mask_BT: torch.Tensor
) -> AdvantageOutput:
    """RLOO, REINFORCE Leave-One-Out (Kool et al. 2019; Ahmadian et al. 2024 for LLMs).

    ``A_i = r_i - mean_{j != i} r_j`` over the other members of ``i``'s group, an unbiased
    baseline (it does not depend on ``r_i``). Equal to ``n/(n-1) * (r_i - mean_group)``. A group
    of one has no baseline and gets 0 (counted in ``stats.num_zero_adv_groups`` with the groups of
    equal rewards). Kept: the sequence-level form; dropped: per-token KL in the reward (apply
    :func:`trainers.kl.kl_penalized_rewards` to the sequence reward before, if wanted).
    """
    _check_sequence_inputs(rewards_B, mask_BT)
    rewards_B = _float(rewards_B)  # B
    m_BT = as_mask(mask_BT, rewards_B)  # B x T
    index_B, G, count_G, sum_G, degenerate_G = _groups(rewards_B, group_ids_B)
    others_B = (count_G[index_B] - 1).clamp(min=1)  # B
    baseline_B = (sum_G[index_B] - rewards_B) / others_B  # B
    adv_B = rewards_B - baseline_B  # B
    adv_B = torch.where(degenerate_G[index_B], torch.zeros_like(adv_B), adv_B)  # B
    advantages_BT = adv_B[:, None] * m_BT  # B x T
    stats = _stats(advantages_BT, m_BT, num_groups=G, num_zero_adv_groups=int(degenerate_G.sum().item()))
    return AdvantageOutput(advantages_BT=advantages_BT, returns_BT=None, stats=stats)


def _check_token_rewards(token_rewards_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """The token rewards as floats, after checking they sit only on trained tokens."""
    if mask_BT.dim() != 2:
        raise ConfigError(f"mask_BT must have 2 dimensions (B x T), got shape {tuple(mask_BT.shape)}")
    check_shape("token_rewards_BT", token_rewards_BT, tuple(mask_BT.shape))
    rewards_BT = _float(token_rewards_BT)
    off_mask = (rewards_BT != 0) & (mask_BT == 0)  # B x T
    if bool(off_mask.any()):
        b, t = (int(i) for i in off_mask.nonzero()[0])
        raise ConfigError(
            f"token_rewards_BT has a nonzero reward at a position with mask 0 (sequence {b}, "
            f"token {t}): put each turn's reward on that turn's last generated token (mask 1)"
        )
    return rewards_BT


@torch.no_grad()
def discounted_returns(
    token_rewards_BT: torch.Tensor, mask_BT: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:
    """Token-level discounted returns ``G_t = r_t + gamma * G_next``, shape ``B x T``.

    ``next`` is the next trained token of the same sequence: mask-0 positions (observations) are
    skipped, so ``gamma`` discounts once per generated token. Returns are 0 at mask-0 positions.
    Used by REINFORCE++; for discounting per turn instead, see :func:`turn_returns`.
    """
    rewards_BT = _check_token_rewards(token_rewards_BT, mask_BT)  # B x T
    m_BT = as_mask(mask_BT, rewards_BT)  # B x T
    B, T = rewards_BT.shape
    returns_BT = torch.zeros_like(rewards_BT)  # B x T
    next_B = rewards_BT.new_zeros(B)  # B, return of the next trained token
    for t in range(T - 1, -1, -1):
        g_B = rewards_BT[:, t] + gamma * next_B  # B
        returns_BT[:, t] = g_B * m_BT[:, t]
        next_B = torch.where(m_BT[:, t] > 0, g_B, next_B)  # B
    return returns_BT


@torch.no_grad()
def turn_returns(token_rewards_BT: torch.Tensor, mask_BT: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Per-turn discounted returns spread over each turn's tokens, shape ``B x T``.

    A turn is a maximal run of consecutive mask-1 tokens (observation or template tokens, mask 0,
    separate turns). With turn rewards ``R_k`` (the sum of ``token_rewards_BT`` over turn ``k``,
    normally one value at its last token), turn ``k`` gets ``sum_{j >= k} gamma^(j - k) R_j``
    and each of its tokens carries that value; mask-0 positions get 0. ``gamma = 1`` gives every
    turn the sum of the rewards from that turn on; ``gamma < 1`` credits later rewards less to
    earlier turns. The result can serve as ``rewards`` for per-turn baselines or as advantages.
    """
    rewards_BT = _check_token_rewards(token_rewards_BT, mask_BT)  # B x T
    m_BT = as_mask(mask_BT, rewards_BT)  # B x T
    on_BT = m_BT > 0  # B x T
    prev_BT = torch.zeros_like(on_BT)
    prev_BT[:, 1:] = on_BT[:, :-1]
    starts_BT = on_BT & ~prev_BT  # B x T, first token of each turn
    turn_BT = starts_BT.long().cumsum(dim=1) - 1  # B x T, turn index (valid where on)
    turn_BT = torch.where(on_BT, turn_BT, torch.zeros_like(turn_BT)).clamp(min=0)  # B x T
    K = int(starts_BT.sum(dim=1).max().item()) if rewards_BT.numel() else 0
    if K == 0:
        return torch.zeros_like(rewards_BT)
    turn_rewards_BK = rewards_BT.new_zeros(rewards_BT.shape[0], K).scatter_add(1, turn_BT, rewards_BT * m_BT)
    returns_BK = torch.zeros_like(turn_rewards_BK)  # B x K
    running_B = rewards_BT.new_zeros(rewards_BT.shape[0])  # B
    for k in range(K - 1, -1, -1):
        running_B = turn_rewards_BK[:, k] + gamma * running_B  # B
        returns_BK[:, k] = running_B
    return returns_BK.gather(1, turn_BT) * m_BT  # B x T


@torch.no_grad()
def reinforce_pp_advantages(
    token_rewards_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    gamma: float = 1.0,
    discount: Literal["token", "turn"] = "token",
    whiten: bool = True,
    eps: float = 1e-6,
) -> AdvantageOutput:
    """REINFORCE++ (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large
    Language Models").

    The advantage of a token is its discounted return (:func:`discounted_returns`), with any KL
    penalty already subtracted from ``token_rewards_BT`` (see
    :func:`trainers.kl.kl_penalized_rewards`), then whitened over all trained tokens of the batch
    (global, not per group: ``(G - mean) / (std + eps)``, unbiased std). Kept: token-level KL in
    the reward, global whitening. Dropped: the paper's PPO-clip loss is chosen separately
    (:func:`trainers.losses.policy_loss`), and the ``REINFORCE++-baseline`` variant (group mean
    first) is not offered here.

    ``discount="token"`` (the paper's) discounts once per generated token
    (:func:`discounted_returns`); ``discount="turn"`` once per turn (:func:`turn_returns`), which
    suits multi-turn agents, whose turns differ widely in length. With ``gamma = 1`` and rewards
    only at each turn's last token the two agree; with per-token KL penalties in the rewards they
    differ (``"turn"`` charges every token of a turn the whole turn's KL).
    """
    if discount == "token":
        returns_BT = discounted_returns(token_rewards_BT, mask_BT, gamma)  # B x T
    elif discount == "turn":
        returns_BT = turn_returns(token_rewards_BT, mask_BT, gamma)  # B x T
    else:
        raise ConfigError(f"unknown discount {discount!r}; choose 'token' or 'turn'")
    m_BT = as_mask(mask_BT, returns_BT)  # B x T
    advantages_BT = masked_whiten(returns_BT, m_BT, eps) if whiten else returns_BT.clone()  # B x T
    return AdvantageOutput(
        advantages_BT=advantages_BT,
        returns_BT=returns_BT,
        stats=_stats(advantages_BT, m_BT, returns_BT=returns_BT),
    )


@torch.no_grad()
def gae_advantages(
    token_rewards_BT: torch.Tensor,
    values_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = False,
    eps: float = 1e-6,
) -> AdvantageOutput:
    """Generalized advantage estimation (Schulman et al. 2016) for PPO with a critic.

    ``values_BT[:, t]`` is the critic's value of the state in which token ``t`` was generated
    (read from the same position as the logits that predicted token ``t``). Over the trained
    tokens of each sequence, from the last back:
    ``delta_t = r_t + gamma * V_next - V_t``, ``A_t = delta_t + gamma * lam * A_next``, where
    ``next`` is the next trained token (mask-0 observation tokens are skipped: they neither
    discount nor bootstrap; see ``docs/decisions/0003-masked-positions-in-returns-and-gae.md``).
    After a sequence's last trained token ``V_next = 0``: the episode is treated as terminal,
    truncated ones included. ``returns_BT = A + V`` are the critic's targets. ``whiten=True``
    normalizes the advantages over the batch (common in PPO for LLMs); returns are computed
    before whitening. LLM practice (and this default) is ``gamma = lam = 1``.
    """
    rewards_BT = _check_token_rewards(token_rewards_BT, mask_BT)  # B x T
    check_shape("values_BT", values_BT, tuple(rewards_BT.shape))
    m_BT = as_mask(mask_BT, rewards_BT)  # B x T
    on_BT = m_BT > 0  # B x T
    values_BT = torch.where(on_BT, values_BT.detach().to(rewards_BT.dtype), torch.zeros_like(rewards_BT))
    B, T = rewards_BT.shape
    advantages_BT = torch.zeros_like(rewards_BT)  # B x T
    next_value_B = rewards_BT.new_zeros(B)  # B, V of the next trained token (0 past the end)
    next_adv_B = rewards_BT.new_zeros(B)  # B, A of the next trained token
    for t in range(T - 1, -1, -1):
        delta_B = rewards_BT[:, t] + gamma * next_value_B - values_BT[:, t]  # B
        adv_B = delta_B + gamma * lam * next_adv_B  # B
        advantages_BT[:, t] = adv_B * m_BT[:, t]
        next_value_B = torch.where(on_BT[:, t], values_BT[:, t], next_value_B)  # B
        next_adv_B = torch.where(on_BT[:, t], adv_B, next_adv_B)  # B
    returns_BT = (advantages_BT + values_BT) * m_BT  # B x T
    if whiten:
        advantages_BT = masked_whiten(advantages_BT, m_BT, eps)  # B x T
    return AdvantageOutput(
        advantages_BT=advantages_BT,
        returns_BT=returns_BT,
        stats=_stats(advantages_BT, m_BT, returns_BT=returns_BT),
    )


@torch.no_grad()
def compute_advantages(
    name: AdvantageEstimator | str,
    mask_BT: torch.Tensor,
    *,
    rewards_B: torch.Tensor | None = None,
    group_ids_B: torch.Tensor | None = None,
    token_rewards_BT: torch.Tensor | None = None,
    values_BT: torch.Tensor | None = None,
    kl_BT: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
    lam: float = 1.0,
    discount: Literal["token", "turn"] = "token",
    eps: float = 1e-6,
) -> AdvantageOutput:
    """The advantages of estimator ``name`` (an :class:`AdvantageEstimator` value).

    Inputs each estimator needs:

    - ``grpo``, ``dr_grpo``, ``rloo``: ``group_ids_B`` and ``rewards_B`` (when ``rewards_B`` is
      omitted, each sequence's reward is the sum of its ``token_rewards_BT``).
    - ``reinforce_pp``: ``token_rewards_BT``; ``gamma`` applied per ``discount`` unit
      (``"token"`` or ``"turn"``).
    - ``gae``: ``token_rewards_BT`` and ``values_BT``; ``gamma``, ``lam``.

    ``kl_BT`` with ``kl_coef > 0`` puts the KL penalty in the token rewards (token-level
    estimators only). Missing inputs raise :class:`ConfigError` saying which.
    """
    kind = parse_choice(AdvantageEstimator, name)
    if kind in (AdvantageEstimator.GIGPO, AdvantageEstimator.MT_GRPO):
        raise ConfigError(
            f"{kind.value!r} needs each episode's turns (spans, rewards, states), not token tensors: "
            "use trainers.turn_advantages.turn_level_advantages"
        )

    def need(value: torch.Tensor | None, what: str) -> torch.Tensor:
        if value is None:
            raise ConfigError(f"advantage estimator {kind.value!r} needs {what}")
        return value

    if kind in (AdvantageEstimator.GRPO, AdvantageEstimator.DR_GRPO, AdvantageEstimator.RLOO):
        if kl_BT is not None and kl_coef != 0:
            raise ConfigError(
                f"KL in the reward needs a token-level estimator ('reinforce_pp' or 'gae'), not "
                f"{kind.value!r}: put the KL in the loss (trainers.kl.kl_loss) instead"
            )
        if rewards_B is None:
            rewards_B = need(token_rewards_BT, "rewards_B (or token_rewards_BT to sum)").sum(dim=1)
        group_ids_B = need(group_ids_B, "group_ids_B (see trainers.advantages.contiguous_group_ids)")
    else:
        token_rewards_BT = need(token_rewards_BT, "token_rewards_BT (each turn's reward at its last token)")
        if kl_BT is not None and kl_coef != 0:
            token_rewards_BT = kl_penalized_rewards(token_rewards_BT, kl_BT, mask_BT, kl_coef)

    match kind:
        case AdvantageEstimator.GRPO:
            return grpo_advantages(rewards_B, group_ids_B, mask_BT, normalize_std=True, eps=eps)
        case AdvantageEstimator.DR_GRPO:
            return grpo_advantages(rewards_B, group_ids_B, mask_BT, normalize_std=False, eps=eps)
        case AdvantageEstimator.RLOO:
            return rloo_advantages(rewards_B, group_ids_B, mask_BT)
        case AdvantageEstimator.REINFORCE_PP:
            return reinforce_pp_advantages(token_rewards_BT, mask_BT, gamma=gamma, discount=discount, eps=eps)
        case AdvantageEstimator.GAE:
            values_BT = need(values_BT, "values_BT (the critic's value of each token)")
            return gae_advantages(token_rewards_BT, values_BT, mask_BT, gamma=gamma, lam=lam, eps=eps)
    raise ValueError(f"unknown advantage estimator {name!r}")


def episode_advantages(
    name: AdvantageEstimator | str, rewards_E: torch.Tensor, group_ids_E: torch.Tensor
) -> torch.Tensor:
    """One advantage per episode (``E``) from its total reward, for training on several samples
    per episode (a stretch or a turn each; see :func:`skyrl_agent.context.training_samples`):
    every sample of an episode gets the episode's advantage, and each episode counts once in its
    group's baseline however many samples it has. For the outcome estimators (``grpo``,
    ``dr_grpo``, ``rloo``; ``reinforce_pp`` whitens the episode rewards over the batch); ``gae``
    needs per-token values and raises :class:`ConfigError`."""
    kind = parse_choice(AdvantageEstimator, name)
    if kind in (AdvantageEstimator.GAE, AdvantageEstimator.GIGPO, AdvantageEstimator.MT_GRPO):
        raise ConfigError(
            f"per-episode advantages need an outcome estimator (grpo, dr_grpo, rloo, reinforce_pp), not {kind.value}"
        )
    rewards_E = rewards_E.to(torch.float32)
    ones_E1 = torch.ones(rewards_E.shape[0], 1)  # E x 1: each episode as one "token"
    out = compute_advantages(
        kind, ones_E1, rewards_B=rewards_E, group_ids_B=group_ids_E, token_rewards_BT=rewards_E[:, None]
    )
    return out.advantages_BT[:, 0]  # E
