"""trainers: the native GRPO/PPO trainer.

The algorithms are pure functions over ``B x T`` token tensors (see :mod:`trainers.types` for the
layout): advantage estimators (:func:`compute_advantages`), policy losses (:func:`policy_loss`),
loss reductions (:func:`reduce_loss`), KL to a reference model (:mod:`trainers.kl`), the
entropy bonus and the critic's clipped value loss (:func:`value_loss`). Each returns its result
and a small stats record of plain floats. Logprobs and entropies from logits
(:func:`token_logprobs_from_logits`, :func:`entropy_from_logits`) live in :mod:`trainers.logprobs`.
"""

from trainers.advantages import (
    compute_advantages,
    contiguous_group_ids,
    discounted_returns,
    gae_advantages,
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    turn_returns,
)
from trainers.kl import kl_estimate, kl_loss, kl_penalized_rewards
from trainers.logprobs import entropy_from_logits, token_logprobs_from_logits
from trainers.losses import (
    cispo_loss,
    dro_loss,
    entropy_bonus_loss,
    gspo_loss,
    importance_sampling_loss,
    policy_loss,
    ppo_clip_loss,
    reduce_loss,
    reduction_weights,
    value_loss,
)
from trainers.types import (
    AdvantageEstimator,
    AdvantageOutput,
    AdvantageStats,
    EntropyStats,
    KLConfig,
    KLEstimator,
    KLStats,
    LossReduction,
    PolicyLossConfig,
    PolicyLossStats,
    PolicyLossType,
    ValueLossStats,
)

__all__ = [
    "AdvantageEstimator",
    "AdvantageOutput",
    "AdvantageStats",
    "EntropyStats",
    "KLConfig",
    "KLEstimator",
    "KLStats",
    "LossReduction",
    "PolicyLossConfig",
    "PolicyLossStats",
    "PolicyLossType",
    "ValueLossStats",
    "cispo_loss",
    "compute_advantages",
    "contiguous_group_ids",
    "discounted_returns",
    "entropy_bonus_loss",
    "entropy_from_logits",
    "gae_advantages",
    "grpo_advantages",
    "gspo_loss",
    "importance_sampling_loss",
    "dro_loss",
    "kl_estimate",
    "kl_loss",
    "kl_penalized_rewards",
    "policy_loss",
    "ppo_clip_loss",
    "reduce_loss",
    "reduction_weights",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "token_logprobs_from_logits",
    "turn_returns",
    "value_loss",
]
