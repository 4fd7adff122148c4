"""Data types of the trainer's algorithms: the closed choices, their configs and stats records.

The algorithms themselves are pure functions in :mod:`trainers.advantages`,
:mod:`trainers.losses` and :mod:`trainers.kl`; this module holds only what they take and return,
so the vocabulary is readable in one place.

Shape letters used in tensor names across the trainer:

- ``B``: sequences (responses) in the batch; ``G``: groups (prompts); ``T``: token positions;
  ``V``: vocabulary; ``K``: turns of one sequence.
- ``mask_BT`` is 1 on the tokens the model generated itself (the ones trained on) and 0 on prompt,
  padding and observation tokens. Rewards, advantages and losses live on the ``B x T`` grid.

Stats records hold plain Python floats (not tensors), ready for a metrics logger.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TypeVar

import torch

from skyrl_gym.errors import ConfigError, did_you_mean

__all__ = [
    "AdvantageEstimator",
    "PolicyLossType",
    "KLEstimator",
    "LossReduction",
    "PolicyLossConfig",
    "KLConfig",
    "AdvantageStats",
    "AdvantageOutput",
    "PolicyLossStats",
    "KLStats",
    "EntropyStats",
    "ValueLossStats",
    "parse_choice",
]

_E = TypeVar("_E", bound=StrEnum)


def parse_choice(enum_cls: type[_E], value: str) -> _E:
    """``enum_cls(value)``, or a :class:`ConfigError` that lists the choices and the closest one."""
    try:
        return enum_cls(value)
    except ValueError:
        choices = [member.value for member in enum_cls]
        raise ConfigError(
            f"unknown {enum_cls.__name__} {value!r}; choose one of {choices}."
            + did_you_mean(str(value), choices)
        ) from None


class AdvantageEstimator(StrEnum):
    """How advantages are computed (see :func:`trainers.advantages.compute_advantages`)."""

    GRPO = "grpo"
    """Group mean baseline, divided by the group's reward std (DeepSeekMath, Shao et al. 2024)."""
    DR_GRPO = "dr_grpo"
    """Group mean baseline without the std division (Dr. GRPO, Liu et al. 2025)."""
    RLOO = "rloo"
    """Leave-one-out baseline: the mean of the other samples of the group (Ahmadian et al. 2024)."""
    REINFORCE_PP = "reinforce_pp"
    """Token-level discounted returns, whitened over the batch (REINFORCE++, Hu 2025)."""
    GAE = "gae"
    """Generalized advantage estimation with a critic (Schulman et al. 2016), for PPO."""
    GIGPO = "gigpo"
    """GRPO plus step groups of turns taken from equal anchor states (GiGPO, Feng et al. 2025);
    see :mod:`trainers.turn_advantages`."""
    MT_GRPO = "mt_grpo"
    """The outcome's group advantage plus each turn's process rewards normalized per turn index
    (MT-GRPO, Zeng et al. 2025, extended to k turns); see :mod:`trainers.turn_advantages`."""


class PolicyLossType(StrEnum):
    """Which policy loss (see :func:`trainers.losses.policy_loss`)."""

    PPO_CLIP = "ppo_clip"
    """PPO's clipped surrogate with separate low/high clip and optional dual clip."""
    GSPO = "gspo"
    """Sequence-level, length-normalized ratio with its own clip range (Zheng et al. 2025)."""
    CISPO = "cispo"
    """Clipped, stop-gradient importance weight times the log-probability (MiniMax-M1, 2025)."""
    IMPORTANCE_SAMPLING = "importance_sampling"
    """Ratio times advantage, no clipping."""
    DRO = "dro"
    """Advantage-weighted log-probability minus a squared log-ratio penalty to the sampling
    policy (DRO, Richemond et al. 2024; the loss Tinker calls ``dro``)."""


class KLEstimator(StrEnum):
    """Sample estimators of KL(policy || reference) from J. Schulman, "Approximating KL
    Divergence" (2020), with ``r = reference / policy`` evaluated on tokens sampled from the
    policy."""

    K1 = "k1"
    """``-log r = log(p/q)``: unbiased, high variance, can be negative."""
    K2 = "k2"
    """``(log r)^2 / 2``: biased (low for close distributions), low variance, never negative."""
    K3 = "k3"
    """``(r - 1) - log r``: unbiased, low variance, never negative."""


class LossReduction(StrEnum):
    """How a per-token loss ``loss_BT`` becomes a scalar (see :func:`trainers.losses.reduce_loss`)."""

    TOKEN_MEAN = "token_mean"
    """Sum over all trained tokens divided by their count (DAPO's token-level loss)."""
    SEQ_MEAN_TOKEN_MEAN = "seq_mean_token_mean"
    """Mean over each sequence's trained tokens, then mean over sequences (the original GRPO)."""
    SEQ_MEAN_TOKEN_SUM = "seq_mean_token_sum"
    """Sum over each sequence's trained tokens, then mean over sequences (long sequences weigh
    more; the sequence-sum form in SkyRL's and verl's ``loss_agg_mode`` lists)."""
    SEQ_MEAN_TOKEN_SUM_NORM = "seq_mean_token_sum_norm"
    """Sum over all trained tokens divided by ``B * constant`` (Dr. GRPO: no length bias)."""
    PROMPT_MEAN = "prompt_mean"
    """Mean over the trained tokens of each prompt's group, then mean over the prompts (every
    prompt weighs the same however long its episodes; a long-horizon agent ablation of 2026
    found it about 4 points of mean reward above ``token_mean``)."""


@dataclass(frozen=True)
class PolicyLossConfig:
    """Hyperparameters of the policy losses. The loss itself is chosen by name
    (:class:`PolicyLossType`); each field says which losses read it."""

    eps_low: float = 0.2
    """PPO clip: the ratio is clipped below at ``1 - eps_low``."""
    eps_high: float = 0.2
    """PPO clip: the ratio is clipped above at ``1 + eps_high``; DAPO's clip-higher uses 0.28."""
    dual_clip_c: float | None = None
    """PPO dual clip (Ye et al. 2020): for negative advantages the loss is at most ``-c * A``.
    ``None`` turns it off; must be greater than 1 (3.0 is common)."""
    gspo_eps_low: float = 3e-4
    """GSPO: the sequence ratio is clipped below at ``1 - gspo_eps_low`` (the paper's 3e-4)."""
    gspo_eps_high: float = 4e-4
    """GSPO: the sequence ratio is clipped above at ``1 + gspo_eps_high`` (the paper's 4e-4)."""
    cispo_eps_low: float = 1.0
    """CISPO: the IS weight is clipped below at ``1 - cispo_eps_low``; 1.0 means no lower bound,
    as in MiniMax-M1, which tunes only the upper bound."""
    cispo_eps_high: float = 0.28
    """CISPO: the IS weight is clipped above at ``1 + cispo_eps_high``."""
    dro_beta: float = 0.1
    """DRO: the weight ``beta`` of the penalty ``0.5 * beta * (logprobs - old_logprobs)^2``."""
    truncated_is: bool = False
    """Multiply every token's loss by ``min(exp(old - rollout), tis_cap)`` (detached) to correct
    for the inference engine sampling from a slightly different distribution than the trainer
    computes (Yao et al. 2025). Needs ``rollout_logprobs_BT``."""
    tis_cap: float = 2.0
    """Truncated importance sampling: the upper bound ``C`` of the weight."""
    reduction: LossReduction = LossReduction.TOKEN_MEAN
    """How per-token losses become one number (see :class:`LossReduction`)."""
    norm_constant: float | None = None
    """``seq_mean_token_sum_norm`` divides by ``B * norm_constant``; ``None`` means the padded
    length ``T``. Set it to the maximum generation length for Dr. GRPO."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "reduction", parse_choice(LossReduction, self.reduction))
        for name in ("eps_low", "eps_high", "gspo_eps_low", "gspo_eps_high", "cispo_eps_high", "dro_beta"):
            if getattr(self, name) < 0:
                raise ConfigError(f"PolicyLossConfig.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("eps_low", "gspo_eps_low"):
            if getattr(self, name) >= 1:
                raise ConfigError(
                    f"PolicyLossConfig.{name} must be < 1 (the lower clip bound 1 - {name} must stay "
                    f"positive), got {getattr(self, name)}"
                )
        if not 0 <= self.cispo_eps_low <= 1:
            raise ConfigError(
                "PolicyLossConfig.cispo_eps_low must be in [0, 1] (1 = no lower bound), "
                f"got {self.cispo_eps_low}"
            )
        if self.dual_clip_c is not None and self.dual_clip_c <= 1:
            raise ConfigError(f"PolicyLossConfig.dual_clip_c must be > 1 (e.g. 3.0), got {self.dual_clip_c}")
        if self.tis_cap <= 0:
            raise ConfigError(f"PolicyLossConfig.tis_cap must be > 0 (e.g. 2.0), got {self.tis_cap}")
        if self.norm_constant is not None and self.norm_constant <= 0:
            raise ConfigError(
                f"PolicyLossConfig.norm_constant must be > 0 (e.g. the max generation length), "
                f"got {self.norm_constant}"
            )


@dataclass(frozen=True)
class KLConfig:
    """KL regularization to a frozen reference model."""

    estimator: KLEstimator = KLEstimator.K3
    """Which sample estimator (see :class:`KLEstimator`)."""
    coef: float = 0.0
    """Weight of the KL term; 0 turns it off."""
    in_reward: bool = False
    """``True``: subtract ``coef * kl`` from the token rewards before computing advantages (as in
    InstructGPT and REINFORCE++). ``False``: add ``coef * kl`` to the loss (as in GRPO)."""
    clamp: float | None = None
    """If set, clamp each token's estimate into ``[-clamp, clamp]`` (guards k3 against overflow
    when the policy drifts far from the reference)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "estimator", parse_choice(KLEstimator, self.estimator))
        if self.coef < 0:
            raise ConfigError(f"KLConfig.coef must be >= 0, got {self.coef}")
        if self.clamp is not None and self.clamp <= 0:
            raise ConfigError(f"KLConfig.clamp must be > 0 or None, got {self.clamp}")


@dataclass(frozen=True)
class AdvantageStats:
    """What an advantage estimator reports about one batch."""

    num_sequences: int
    """Sequences in the batch (``B``)."""
    num_tokens: int
    """Trained tokens (``mask_BT.sum()``)."""
    num_groups: int = 0
    """Groups (prompts); 0 for estimators that do not use groups."""
    num_zero_adv_groups: int = 0
    """Groups whose rewards are all equal (or that have one member): their advantages are zero,
    so they give no learning signal."""
    adv_mean: float = 0.0
    """Mean advantage over trained tokens."""
    adv_std: float = 0.0
    """Standard deviation of the advantage over trained tokens."""
    adv_min: float = 0.0
    """Smallest advantage over trained tokens."""
    adv_max: float = 0.0
    """Largest advantage over trained tokens."""
    returns_mean: float | None = None
    """Mean return over trained tokens, for estimators that compute returns."""

    def as_dict(self) -> dict[str, float | int | None]:
        """The fields as a flat dict, for a metrics logger."""
        return asdict(self)


@dataclass(frozen=True)
class AdvantageOutput:
    """What :func:`trainers.advantages.compute_advantages` returns."""

    advantages_BT: torch.Tensor
    """``torch.Tensor`` of shape ``B x T``; zero where ``mask_BT`` is 0."""
    returns_BT: torch.Tensor | None
    """``torch.Tensor`` of shape ``B x T`` (value-function targets for GAE, discounted returns
    for REINFORCE++), or ``None`` for the group estimators."""
    stats: AdvantageStats
    """Summary numbers."""


@dataclass(frozen=True)
class PolicyLossStats:
    """What a policy loss reports about one batch (all over trained tokens)."""

    loss: float
    """The reduced loss (the number that was backpropagated)."""
    num_tokens: int
    """Trained tokens."""
    clip_frac_low: float
    """PPO/GSPO: fraction of tokens with a negative advantage and a ratio below the lower bound
    (the clip removed their gradient). CISPO: fraction whose IS weight hit the lower bound."""
    clip_frac_high: float
    """PPO/GSPO: fraction of tokens with a positive advantage and a ratio above the upper bound.
    CISPO: fraction whose IS weight hit the upper bound."""
    dual_clip_frac: float
    """Fraction of tokens where the dual clip bound was active (PPO with ``dual_clip_c``)."""
    ratio_mean: float
    """Mean of the importance ratio ``pi / pi_old`` used by the loss (the sequence ratio for GSPO)."""
    ratio_max: float
    """Largest ratio."""
    ratio_min: float
    """Smallest ratio."""
    approx_kl: float
    """k3 estimate of KL(pi_old || pi) from the token ratios: how far this update moved."""
    tis_weight_mean: float = 1.0
    """Mean truncated importance-sampling weight (1.0 when off)."""
    tis_capped_frac: float = 0.0
    """Fraction of tokens whose TIS weight hit the cap."""
    rollout_kl: float | None = None
    """k3 estimate of KL(rollout || old) when rollout logprobs were given: the mismatch between
    the inference engine and the trainer."""

    def as_dict(self) -> dict[str, float | int | None]:
        """The fields as a flat dict, for a metrics logger."""
        return asdict(self)


@dataclass(frozen=True)
class KLStats:
    """What the KL term reports (over trained tokens)."""

    kl_mean: float
    """Mean per-token KL estimate."""
    kl_max: float
    """Largest per-token KL estimate."""
    loss: float
    """``coef * reduced KL``, the number to add to the loss."""

    def as_dict(self) -> dict[str, float]:
        """The fields as a flat dict, for a metrics logger."""
        return asdict(self)


@dataclass(frozen=True)
class EntropyStats:
    """What the entropy bonus reports (over trained tokens)."""

    entropy_mean: float
    """Mean per-token entropy of the policy, in nats."""
    loss: float
    """``-coef * reduced entropy`` (the number added to the loss)."""

    def as_dict(self) -> dict[str, float]:
        """The fields as a flat dict, for a metrics logger."""
        return asdict(self)


@dataclass(frozen=True)
class ValueLossStats:
    """What the critic's value loss reports (over trained tokens)."""

    loss: float
    """The reduced value loss (before ``value_coef``)."""
    clip_frac: float
    """Fraction of tokens where the clipped error was the larger one (their gradient is cut)."""
    value_mean: float
    """Mean predicted value."""
    returns_mean: float
    """Mean target (return)."""
    explained_variance: float
    """``1 - Var(returns - values) / Var(returns)``: 1 is a perfect critic, 0 no better than a
    constant, negative worse (0 when the returns do not vary)."""

    def as_dict(self) -> dict[str, float]:
        """The fields as a flat dict, for a metrics logger."""
        return asdict(self)
