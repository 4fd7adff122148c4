"""Policy losses, loss reductions and the entropy bonus, as pure functions.

Conventions (shared with :mod:`trainers.advantages` and :mod:`trainers.kl`):

- A batch is ``B`` sequences by ``T`` token positions. ``mask_BT`` is 1 on tokens the model
  generated itself (the ones trained on) and 0 on prompt, padding and observation tokens.
- ``logprobs_BT`` are the current policy's log-probabilities of the sampled tokens (with
  gradient); ``old_logprobs_BT`` the same tokens under the policy that sampled them, as
  recomputed by the trainer (no gradient); ``rollout_logprobs_BT`` what the inference engine
  reported while sampling (optional; used by truncated importance sampling).
- Every policy loss computes a per-token loss ``loss_BT``, optionally multiplies it by a truncated
  importance-sampling weight, and reduces it with :func:`reduce_loss`. It returns
  ``(loss, PolicyLossStats)``; the loss is a scalar tensor to minimize (the negative objective).
- Masked-out positions contribute nothing to the loss or the gradient, whatever their inputs hold
  (even ``inf`` or ``nan``): inputs are zeroed there before any arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from skyrl_gym.errors import ConfigError
from trainers._masked import as_mask, check_shape, masked_mean
from trainers.types import (
    EntropyStats,
    LossReduction,
    PolicyLossConfig,
    PolicyLossStats,
    PolicyLossType,
    ValueLossStats,
    parse_choice,
)

__all__ = [
    "reduce_loss",
    "reduction_weights",
    "policy_loss",
    "ppo_clip_loss",
    "gspo_loss",
    "cispo_loss",
    "importance_sampling_loss",
    "dro_loss",
    "entropy_bonus_loss",
    "value_loss",
]

_DEFAULT_CONFIG = PolicyLossConfig()


def reduction_weights(
    mask_BT: torch.Tensor,
    mode: LossReduction | str = LossReduction.TOKEN_MEAN,
    *,
    group_ids_B: torch.Tensor | None = None,
    norm_constant: float | None = None,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
) -> torch.Tensor:
    """Per-sequence weights ``w_B`` such that ``reduce_loss(loss_BT, mask_BT, mode)`` equals
    ``sum_b w_B[b] * sum_t (loss_BT * mask_BT)[b, t]`` for the mode (see :func:`reduce_loss`).

    The train step computes them once on the whole batch and passes each micro-batch its rows,
    so a mode that needs the whole batch (``prompt_mean``: the tokens of a prompt's whole group)
    is exact however the batch is split into micro-batches and ranks. ``group_ids_B`` (the
    prompt group of each sequence) is needed by ``prompt_mean`` only."""
    mode = parse_choice(LossReduction, mode)
    m_BT = (mask_BT > 0).to(torch.float64)  # B x T; weights in float64, cast by the caller
    B, T = m_BT.shape
    tok_B = m_BT.sum(dim=1)  # B, trained tokens per sequence
    n_seq = max(float(num_sequences) if num_sequences is not None else float(B), 1.0)
    ones_B = torch.ones(B, dtype=torch.float64, device=m_BT.device)  # B
    match mode:
        case LossReduction.TOKEN_MEAN:
            n_tok = float(num_tokens) if num_tokens is not None else float(tok_B.sum())
            return ones_B / max(n_tok, 1.0)
        case LossReduction.SEQ_MEAN_TOKEN_MEAN:
            return 1.0 / (tok_B.clamp(min=1.0) * n_seq)
        case LossReduction.SEQ_MEAN_TOKEN_SUM:
            return ones_B / n_seq
        case LossReduction.SEQ_MEAN_TOKEN_SUM_NORM:
            constant = float(norm_constant) if norm_constant is not None else float(T)
            return ones_B / max(n_seq * constant, 1.0)
        case LossReduction.PROMPT_MEAN:
            if group_ids_B is None:
                raise ConfigError(
                    "reduction 'prompt_mean' needs group_ids_B (the prompt group of each sequence)"
                )
            check_shape("group_ids_B", group_ids_B, (B,))
            _, group_B = torch.unique(group_ids_B.to(m_BT.device), return_inverse=True)  # B, 0..G-1
            G = int(group_B.max()) + 1 if B else 0
            group_tok_G = torch.zeros(G, dtype=torch.float64, device=m_BT.device).index_add_(
                0, group_B, tok_B
            )
            return 1.0 / (group_tok_G.clamp(min=1.0)[group_B] * max(G, 1))
    raise ValueError(f"unknown loss reduction {mode!r}")


def reduce_loss(
    loss_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    mode: LossReduction | str = LossReduction.TOKEN_MEAN,
    *,
    norm_constant: float | None = None,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    group_ids_B: torch.Tensor | None = None,
    weights_B: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar over the trained tokens.

    - ``token_mean``: ``sum(loss * mask) / num_tokens`` (every token weighs the same; DAPO).
    - ``seq_mean_token_mean``: the mean over each sequence's trained tokens, summed over
      sequences and divided by ``num_sequences`` (every sequence weighs the same; the original
      GRPO). Short sequences weigh more per token, which Dr. GRPO calls a length bias.
    - ``seq_mean_token_sum``: each sequence's summed loss, averaged over ``num_sequences``.
    - ``seq_mean_token_sum_norm``: ``sum(loss * mask) / (num_sequences * norm_constant)`` (Dr.
      GRPO, Liu et al. 2025: a constant in place of each sequence's length, so no length bias).
      ``norm_constant`` defaults to ``T``; set it to the maximum generation length.
    - ``prompt_mean``: the token mean within each prompt's group (``group_ids_B``), then the
      mean over the groups (every prompt weighs the same).

    ``num_tokens`` and ``num_sequences`` default to this batch's counts (``mask_BT.sum()`` and
    ``B``; sequences without a trained token count as zero loss). ``weights_B`` (from
    :func:`reduction_weights` on the whole optimizer step) replaces all of these: the loss is
    then ``sum_b weights_B[b] * sum_t loss``, which is how a step split into micro-batches gets
    the loss of the full batch.
    """
    check_shape("mask_BT", mask_BT, tuple(loss_BT.shape))
    if loss_BT.dim() != 2:
        raise ConfigError(f"loss_BT must have 2 dimensions (B x T), got shape {tuple(loss_BT.shape)}")
    m_BT = as_mask(mask_BT, loss_BT)  # B x T
    safe_BT = torch.where(m_BT > 0, loss_BT, torch.zeros_like(loss_BT))  # B x T, masked-out = 0
    if weights_B is None:
        weights_B = reduction_weights(
            m_BT,
            mode,
            group_ids_B=group_ids_B,
            norm_constant=norm_constant,
            num_tokens=num_tokens,
            num_sequences=num_sequences,
        )
    check_shape("weights_B", weights_B, (loss_BT.shape[0],))
    return (safe_BT.sum(dim=1) * weights_B.to(safe_BT.dtype)).sum()


def _zero_masked(x_BT: torch.Tensor | None, m_BT: torch.Tensor) -> torch.Tensor | None:
    """``x_BT`` with masked-out positions set to 0, so no ``inf``/``nan`` there reaches a gradient."""
    if x_BT is None:
        return None
    return torch.where(m_BT > 0, x_BT, torch.zeros_like(x_BT))


def _prepare(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    rollout_logprobs_BT: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    if logprobs_BT.dim() != 2:
        raise ConfigError(f"logprobs_BT must have 2 dimensions (B x T), got shape {tuple(logprobs_BT.shape)}")
    shape = tuple(logprobs_BT.shape)
    for name, t in (
        ("old_logprobs_BT", old_logprobs_BT),
        ("advantages_BT", advantages_BT),
        ("mask_BT", mask_BT),
        ("rollout_logprobs_BT", rollout_logprobs_BT),
    ):
        check_shape(name, t, shape)
    m_BT = as_mask(mask_BT, logprobs_BT)  # B x T
    logp_BT = _zero_masked(logprobs_BT, m_BT)  # B x T
    old_BT = _zero_masked(old_logprobs_BT.detach().to(logprobs_BT.dtype), m_BT)  # B x T
    adv_BT = _zero_masked(advantages_BT.detach().to(logprobs_BT.dtype), m_BT)  # B x T
    rollout_BT = None
    if rollout_logprobs_BT is not None:
        rollout_BT = _zero_masked(rollout_logprobs_BT.detach().to(logprobs_BT.dtype), m_BT)
    return logp_BT, old_BT, adv_BT, m_BT, rollout_BT


def _clipped_surrogate(
    ratio_BT: torch.Tensor,
    adv_BT: torch.Tensor,
    eps_low: float,
    eps_high: float,
    dual_clip_c: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's pessimistic clipped loss ``max(-A r, -A clip(r))`` plus the dual clip.

    Returns ``loss_BT`` and the boolean masks of tokens clipped low, clipped high and dual-clipped
    (the tokens whose gradient the clip removes)."""
    unclipped_BT = -adv_BT * ratio_BT  # B x T
    clipped_BT = -adv_BT * ratio_BT.clamp(1.0 - eps_low, 1.0 + eps_high)  # B x T
    loss_BT = torch.maximum(unclipped_BT, clipped_BT)  # B x T
    low_BT = (adv_BT < 0) & (ratio_BT < 1.0 - eps_low)  # B x T: clipped term chosen, constant
    high_BT = (adv_BT > 0) & (ratio_BT > 1.0 + eps_high)  # B x T
    dual_BT = torch.zeros_like(low_BT)
    if dual_clip_c is not None:
        bound_BT = -adv_BT * dual_clip_c  # B x T, positive where A < 0
        dual_BT = (adv_BT < 0) & (loss_BT > bound_BT)  # B x T, i.e. ratio > c
        loss_BT = torch.where(adv_BT < 0, torch.minimum(loss_BT, bound_BT), loss_BT)  # B x T
    return loss_BT, low_BT, high_BT, dual_BT


def _finish(
    loss_BT: torch.Tensor,
    m_BT: torch.Tensor,
    config: PolicyLossConfig,
    *,
    token_log_ratio_BT: torch.Tensor,
    ratio_BT: torch.Tensor,
    low_BT: torch.Tensor,
    high_BT: torch.Tensor,
    dual_BT: torch.Tensor,
    old_BT: torch.Tensor,
    rollout_BT: torch.Tensor | None,
    weights_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """Apply truncated importance sampling, reduce, and collect the stats (one device sync)."""
    if config.truncated_is and rollout_BT is None:
        raise ConfigError(
            "PolicyLossConfig.truncated_is is on but rollout_logprobs_BT was not given: pass the "
            "inference engine's logprobs of the sampled tokens, or set truncated_is=False"
        )
    with torch.no_grad():
        extra: dict[str, torch.Tensor] = {}
        if rollout_BT is not None:
            rollout_log_ratio_BT = old_BT - rollout_BT  # B x T, log(pi_old / pi_rollout)
            # k3 of KL(rollout || old) on tokens sampled by the rollout engine
            k3_BT = torch.expm1(rollout_log_ratio_BT) - rollout_log_ratio_BT  # B x T
            extra["rollout_kl"] = masked_mean(k3_BT, m_BT)
            if config.truncated_is:
                raw_w_BT = rollout_log_ratio_BT.exp()  # B x T
                w_BT = raw_w_BT.clamp(max=config.tis_cap)  # B x T
                extra["tis_weight_mean"] = masked_mean(w_BT, m_BT)
                extra["tis_capped_frac"] = masked_mean((raw_w_BT > config.tis_cap).to(m_BT.dtype), m_BT)
    if config.truncated_is:
        loss_BT = loss_BT * w_BT  # B x T, w_BT carries no gradient
    loss = reduce_loss(
        loss_BT, m_BT, config.reduction, norm_constant=config.norm_constant, weights_B=weights_B
    )
    with torch.no_grad():
        on_BT = m_BT > 0  # B x T
        r_BT = ratio_BT.detach()  # B x T
        log_r_BT = token_log_ratio_BT.detach()  # B x T
        # k3 of KL(old || new): r = new/old on tokens sampled from old
        approx_kl_BT = torch.expm1(log_r_BT) - log_r_BT  # B x T
        inf = torch.tensor(float("inf"), dtype=r_BT.dtype, device=r_BT.device)
        named = {
            "loss": loss.detach(),
            "num_tokens": m_BT.sum(),
            "clip_frac_low": masked_mean(low_BT.to(m_BT.dtype), m_BT),
            "clip_frac_high": masked_mean(high_BT.to(m_BT.dtype), m_BT),
            "dual_clip_frac": masked_mean(dual_BT.to(m_BT.dtype), m_BT),
            "ratio_mean": masked_mean(r_BT, m_BT),
            "ratio_max": torch.where(on_BT, r_BT, -inf).max(),
            "ratio_min": torch.where(on_BT, r_BT, inf).min(),
            "approx_kl": masked_mean(approx_kl_BT, m_BT),
            **extra,
        }
        values = dict(zip(named, torch.stack([v.float() for v in named.values()]).tolist(), strict=True))
    num_tokens = int(values.pop("num_tokens"))
    if num_tokens == 0:
        values.update(ratio_mean=1.0, ratio_max=1.0, ratio_min=1.0)
    return loss, PolicyLossStats(num_tokens=num_tokens, **values)


def ppo_clip_loss(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    config: PolicyLossConfig = _DEFAULT_CONFIG,
    *,
    rollout_logprobs_BT: torch.Tensor | None = None,
    weights_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """PPO's clipped surrogate (Schulman et al. 2017) with clip-higher and dual clip.

    Per token, with ``r = exp(logprobs - old_logprobs)``::

        loss = max(-A * r, -A * clip(r, 1 - eps_low, 1 + eps_high))

    Separate ``eps_low``/``eps_high`` is DAPO's clip-higher (Yu et al. 2025): a larger upper bound
    lets low-probability tokens grow, against entropy collapse. The dual clip (Ye et al. 2020,
    "Mastering Complex Control in MOBA Games") bounds the loss of negative-advantage tokens by
    ``-c * A`` so a huge ratio cannot blow up the update: ``loss = min(loss, -c * A)`` for ``A < 0``.
    Kept: the token-level min/clip. Dropped: PPO's value loss and entropy term (see
    :func:`entropy_bonus_loss`; a critic is the trainer's job).
    """
    logp_BT, old_BT, adv_BT, m_BT, rollout_BT = _prepare(
        logprobs_BT, old_logprobs_BT, advantages_BT, mask_BT, rollout_logprobs_BT
    )
    log_ratio_BT = logp_BT - old_BT  # B x T
    ratio_BT = log_ratio_BT.exp()  # B x T
    loss_BT, low_BT, high_BT, dual_BT = _clipped_surrogate(
        ratio_BT, adv_BT, config.eps_low, config.eps_high, config.dual_clip_c
    )
    return _finish(
        loss_BT,
        m_BT,
        config,
        token_log_ratio_BT=log_ratio_BT,
        ratio_BT=ratio_BT,
        low_BT=low_BT,
        high_BT=high_BT,
        dual_BT=dual_BT,
        old_BT=old_BT,
        rollout_BT=rollout_BT,
        weights_B=weights_B,
    )


def gspo_loss(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    config: PolicyLossConfig = _DEFAULT_CONFIG,
    *,
    rollout_logprobs_BT: torch.Tensor | None = None,
    weights_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """GSPO, Group Sequence Policy Optimization (Zheng et al. 2025, Qwen).

    The importance ratio is per sequence and length-normalized, the geometric mean of the token
    ratios: ``s_i = exp(mean_t(logprobs - old_logprobs))`` over sequence ``i``'s trained tokens.
    The PPO clip is applied to ``s_i`` with GSPO's own, much narrower range
    (``gspo_eps_low``/``gspo_eps_high``, 3e-4/4e-4 in the paper). A clipped sequence contributes
    no gradient at all.

    Implemented in the paper's GSPO-token form, ``s_i,t = sg[s_i] * pi(y_t) / sg[pi(y_t)]``: its
    value is ``s_i`` on every token and its gradient is ``s_i * grad log pi(y_t)``, so with one
    advantage per sequence it equals sequence-level GSPO, and per-token advantages (e.g. from
    GAE) also work. Use reduction ``seq_mean_token_mean`` to match the paper's objective exactly.
    Dropped: nothing else; the dual clip does not apply.
    """
    logp_BT, old_BT, adv_BT, m_BT, rollout_BT = _prepare(
        logprobs_BT, old_logprobs_BT, advantages_BT, mask_BT, rollout_logprobs_BT
    )
    token_log_ratio_BT = logp_BT - old_BT  # B x T
    seq_log_ratio_B = masked_mean(token_log_ratio_BT, m_BT, dim=1)  # B, log s_i
    log_s_BT = seq_log_ratio_B.detach()[:, None] + logp_BT - logp_BT.detach()  # B x T, value log s_i
    ratio_BT = log_s_BT.exp()  # B x T
    loss_BT, low_BT, high_BT, _ = _clipped_surrogate(
        ratio_BT, adv_BT, config.gspo_eps_low, config.gspo_eps_high, None
    )
    return _finish(
        loss_BT,
        m_BT,
        config,
        token_log_ratio_BT=token_log_ratio_BT,
        ratio_BT=ratio_BT,
        low_BT=low_BT,
        high_BT=high_BT,
        dual_BT=torch.zeros_like(low_BT),
        old_BT=old_BT,
        rollout_BT=rollout_BT,
        weights_B=weights_B,
    )


def cispo_loss(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    config: PolicyLossConfig = _DEFAULT_CONFIG,
    *,
    rollout_logprobs_BT: torch.Tensor | None = None,
    weights_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """CISPO, Clipped IS-weight Policy Optimization (MiniMax-M1, Chen et al. 2025).

    Per token: ``loss = -sg[clip(r, 1 - cispo_eps_low, 1 + cispo_eps_high)] * A * logprobs``.
    Unlike PPO, no token loses its gradient: the importance weight is clipped and detached, and
    multiplies a REINFORCE term. Kept: the paper's default of no lower bound
    (``cispo_eps_low=1.0``). Dropped: the paper's optional token mask that recovers PPO-style
    dropping. The loss value is a log-likelihood, not on PPO's scale; compare gradients, not values.
    Stats: ``clip_frac_low``/``clip_frac_high`` count truncated weights whatever the advantage's sign.
    """
    logp_BT, old_BT, adv_BT, m_BT, rollout_BT = _prepare(
        logprobs_BT, old_logprobs_BT, advantages_BT, mask_BT, rollout_logprobs_BT
    )
    log_ratio_BT = logp_BT - old_BT  # B x T
    ratio_BT = log_ratio_BT.exp()  # B x T
    lo, hi = 1.0 - config.cispo_eps_low, 1.0 + config.cispo_eps_high
    weight_BT = ratio_BT.clamp(lo, hi).detach()  # B x T, stop-gradient
    loss_BT = -weight_BT * adv_BT * logp_BT  # B x T
    return _finish(
        loss_BT,
        m_BT,
        config,
        token_log_ratio_BT=log_ratio_BT,
        ratio_BT=ratio_BT,
        low_BT=ratio_BT < lo,
        high_BT=ratio_BT > hi,
        dual_BT=torch.zeros_like(ratio_BT, dtype=torch.bool),
        old_BT=old_BT,
        rollout_BT=rollout_BT,
        weights_B=weights_B,
    )


def importance_sampling_loss(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    config: PolicyLossConfig = _DEFAULT_CONFIG,
    *,
    rollout_logprobs_BT: torch.Tensor | None = None,
    weights_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """Plain importance-sampled policy gradient: ``loss = -r * A`` per token, no clipping.

    On-policy (``r = 1``) its gradient is REINFORCE's ``-A * grad log pi`` (Williams 1992); off
    policy it is the unbiased but unbounded-variance importance-sampling estimator. Use it for a
    single update per batch or as a reference against which clipping is measured (this is also
    the loss Tinker calls ``importance_sampling``).
    """
    logp_BT, old_BT, adv_BT, m_BT, rollout_BT = _prepare(
        logprobs_BT, old_logprobs_BT, advantages_BT, mask_BT, rollout_logprobs_BT
    )
    log_ratio_BT = logp_BT - old_BT  # B x T
    ratio_BT = log_ratio_BT.exp()  # B x T
    loss_BT = -ratio_BT * adv_BT  # B x T
    never_BT = torch.zeros_like(ratio_BT, dtype=torch.bool)
    return _finish(
        loss_BT,
        m_BT,
        config,
        token_log_ratio_BT=log_ratio_BT,
        ratio_BT=ratio_BT,
        low_BT=never_BT,
        high_BT=never_BT,
        dual_BT=never_BT,
        old_BT=old_BT,
        rollout_BT=rollout_BT,
        weights_B=weights_B,
    )


def dro_loss(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    config: PolicyLossConfig = _DEFAULT_CONFIG,
    *,
    rollout_logprobs_BT: torch.Tensor | None = None,
    weights_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """DRO, direct reward optimisation (Richemond et al. 2024, "Offline regularised
    reinforcement learning for large language models alignment"), per token::

        loss = -(logprobs * A) + 0.5 * beta * (logprobs - old_logprobs)^2

    the advantage-weighted log-likelihood, held near the sampling policy by a squared log-ratio
    penalty instead of a clip (``beta`` is ``config.dro_beta``). Its gradient is
    ``-(A - beta * (logprobs - old)) * grad logprobs``: on policy plain REINFORCE, and a pull back
    toward the sampler as the policy moves away. Tinker's ``dro`` is this loss summed."""
    logp_BT, old_BT, adv_BT, m_BT, rollout_BT = _prepare(
        logprobs_BT, old_logprobs_BT, advantages_BT, mask_BT, rollout_logprobs_BT
    )
    log_ratio_BT = logp_BT - old_BT  # B x T
    loss_BT = -(logp_BT * adv_BT) + 0.5 * config.dro_beta * log_ratio_BT.square()  # B x T
    never_BT = torch.zeros_like(loss_BT, dtype=torch.bool)
    return _finish(
        loss_BT,
        m_BT,
        config,
        token_log_ratio_BT=log_ratio_BT,
        ratio_BT=log_ratio_BT.exp(),
        low_BT=never_BT,
        high_BT=never_BT,
        dual_BT=never_BT,
        old_BT=old_BT,
        rollout_BT=rollout_BT,
        weights_B=weights_B,
    )


_POLICY_LOSSES: dict[PolicyLossType, Callable[..., tuple[torch.Tensor, PolicyLossStats]]] = {
    PolicyLossType.PPO_CLIP: ppo_clip_loss,
    PolicyLossType.GSPO: gspo_loss,
    PolicyLossType.CISPO: cispo_loss,
    PolicyLossType.IMPORTANCE_SAMPLING: importance_sampling_loss,
    PolicyLossType.DRO: dro_loss,
}


def policy_loss(
    name: PolicyLossType | str,
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    config: PolicyLossConfig = _DEFAULT_CONFIG,
    *,
    rollout_logprobs_BT: torch.Tensor | None = None,
    weights_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """The policy loss called ``name`` (a :class:`PolicyLossType` value) on one batch.

    Returns the scalar loss to minimize and its stats. ``rollout_logprobs_BT`` is needed when
    ``config.truncated_is`` is on; when given otherwise it only feeds ``stats.rollout_kl``.
    ``weights_B`` (see :func:`reduction_weights`) replaces the reduction's own counts.
    """
    kind = parse_choice(PolicyLossType, name)
    fn = _POLICY_LOSSES.get(kind)
    if fn is None:
        raise ValueError(f"unknown policy loss {name!r}")
    return fn(
        logprobs_BT,
        old_logprobs_BT,
        advantages_BT,
        mask_BT,
        config,
        rollout_logprobs_BT=rollout_logprobs_BT,
        weights_B=weights_B,
    )


def entropy_bonus_loss(
    entropy_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    coef: float,
    reduction: LossReduction | str = LossReduction.TOKEN_MEAN,
    *,
    norm_constant: float | None = None,
    weights_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, EntropyStats]:
    """The entropy bonus as a loss term: ``-coef * reduce(entropy_BT)`` (adding it to the loss
    rewards higher entropy). ``entropy_BT`` comes from
    :func:`trainers.logprobs.entropy_from_logits`; PPO
    (Schulman et al. 2017) uses this term, GRPO and DAPO drop it (``coef=0``)."""
    check_shape("mask_BT", mask_BT, tuple(entropy_BT.shape))
    m_BT = as_mask(mask_BT, entropy_BT)  # B x T
    loss = -coef * reduce_loss(entropy_BT, m_BT, reduction, norm_constant=norm_constant, weights_B=weights_B)
    with torch.no_grad():
        stats = EntropyStats(entropy_mean=masked_mean(entropy_BT.detach(), m_BT).item(), loss=loss.item())
    return loss, stats


def value_loss(
    values_BT: torch.Tensor,
    old_values_BT: torch.Tensor,
    returns_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip_eps: float | None = 0.2,
    reduction: LossReduction | str = LossReduction.TOKEN_MEAN,
    norm_constant: float | None = None,
    weights_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ValueLossStats]:
    """PPO's clipped value loss for the critic (Schulman et al. 2017; the clipping as in OpenAI
    baselines' ``ppo2`` and InstructGPT-style RLHF trainers).

    Per token, with ``v`` the critic's new value, ``v_old`` its value when the batch was scored
    and ``R`` the return (GAE's ``A + v_old``)::

        v_clip = v_old + clip(v - v_old, -clip_eps, clip_eps)
        loss   = 0.5 * max((v - R)^2, (v_clip - R)^2)

    so the critic cannot move further than ``clip_eps`` from its old value in one batch (where the
    clipped error is the larger one, the token's gradient is cut). ``clip_eps=None`` or 0 gives
    the plain ``0.5 * (v - R)^2``. Reduced like the policy loss (:func:`reduce_loss`), so both
    weigh tokens alike. Masked-out positions contribute nothing, whatever they hold.
    """
    check_shape("old_values_BT", old_values_BT, tuple(values_BT.shape))
    check_shape("returns_BT", returns_BT, tuple(values_BT.shape))
    check_shape("mask_BT", mask_BT, tuple(values_BT.shape))
    m_BT = as_mask(mask_BT, values_BT)  # B x T
    v_BT = _zero_masked(values_BT, m_BT)  # B x T
    old_BT = _zero_masked(old_values_BT.detach().to(values_BT.dtype), m_BT)  # B x T
    ret_BT = _zero_masked(returns_BT.detach().to(values_BT.dtype), m_BT)  # B x T
    err_BT = (v_BT - ret_BT).square()  # B x T
    if clip_eps:
        v_clip_BT = old_BT + (v_BT - old_BT).clamp(-clip_eps, clip_eps)  # B x T
        err_clip_BT = (v_clip_BT - ret_BT).square()  # B x T
        loss_BT = 0.5 * torch.maximum(err_BT, err_clip_BT)  # B x T
        clipped_BT = err_clip_BT > err_BT  # B x T
    else:
        loss_BT = 0.5 * err_BT  # B x T
        clipped_BT = torch.zeros_like(err_BT, dtype=torch.bool)
    loss = reduce_loss(loss_BT, m_BT, reduction, norm_constant=norm_constant, weights_B=weights_B)
    with torch.no_grad():
        on_BT = m_BT > 0
        ret_N, v_N = ret_BT[on_BT], v_BT.detach()[on_BT]
        var_ret = ret_N.var(unbiased=False) if ret_N.numel() > 1 else ret_N.new_zeros(())
        resid_var = (ret_N - v_N).var(unbiased=False) if ret_N.numel() > 1 else ret_N.new_zeros(())
        ev = (1 - resid_var / var_ret) if float(var_ret) > 1e-12 else ret_N.new_zeros(())
        stats = ValueLossStats(
            loss=float(loss.detach()),
            clip_frac=float(masked_mean(clipped_BT.to(m_BT.dtype), m_BT)),
            value_mean=float(masked_mean(v_BT.detach(), m_BT)),
            returns_mean=float(masked_mean(ret_BT, m_BT)),
            explained_variance=float(ev),
        )
    return loss, stats
