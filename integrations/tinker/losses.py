"""Tinker's loss functions, mapped onto the native trainer's pure losses.

Tinker's losses (the public docs' loss page) are token-level and **summed** over every token of
every datum, never averaged; any normalisation is the caller's, through ``weights`` or
``advantages``. With ``target_logprobs`` the current model's log-probabilities of
``target_tokens`` (with gradient), ``sampling_logprobs`` the sampler's (the ``logprobs`` input)
and ``ratio = exp(target_logprobs - sampling_logprobs)``:

============================  =================================================================
``cross_entropy``              ``sum(-target_logprobs * weights)``
``importance_sampling``        ``-sum(ratio * advantages)``
``ppo``                        ``-sum(min(ratio * A, clip(ratio, low, high) * A))``
``cispo``                      ``-sum(sg(clip(ratio, low, high)) * target_logprobs * A)``
``dro``                        ``-sum(target_logprobs * A - 0.5 * beta * (target_logprobs - sampling_logprobs)^2)``
``gspo``                       ``-sum(min(s * A, clip(s, low, high) * A))`` over the trained tokens
============================  =================================================================

``gspo`` (Zheng et al. 2025) replaces the token ratio by one ratio per datum, the geometric mean
``s = exp(mean(target_logprobs - sampling_logprobs))`` over the datum's *trained tokens*, those
with a nonzero advantage: Tinker datums carry the prompt with advantage 0 and sampler logprob 0,
and a mean over those positions would measure the prompt, not the policy's change. Its gradient
is GSPO's: every trained token gets ``s * grad(target_logprob)`` (the GSPO-token form of
:func:`trainers.losses.gspo_loss`), and a clipped datum gets none. Tinker does not document
``gspo``; this follows the paper and SkyRL's Tinker API, which take the same two ratio bounds as
``ppo`` (default 0.8/1.2 here as for every loss; the paper's range is ``0.9997``/``1.0004``).

``low``/``high`` are ``clip_low_threshold``/``clip_high_threshold`` from ``loss_fn_config``
(ratio bounds, default 0.8/1.2) and ``beta`` (``dro``; default ``PolicyLossConfig.dro_beta``,
0.1) from ``loss_fn_config``. The RL losses are :func:`trainers.losses.importance_sampling_loss`,
:func:`~trainers.losses.ppo_clip_loss`, :func:`~trainers.losses.cispo_loss` and
:func:`~trainers.losses.dro_loss` with the
sampler's logprobs as the old logprobs, every token in the mask (Tinker masks through zero
advantages), ``eps_low = 1 - low``, ``eps_high = high - 1``, and the reduction
``seq_mean_token_sum_norm`` with ``norm_constant = 1`` applied to one datum at a time, which is
exactly that datum's sum; the datums' sums are added. ``cross_entropy`` is not a policy loss in
the trainer, so its one line lives here.

Each loss also gives the per-token loss of every datum (``elementwise_loss``, no gradient), whose
sum equals the loss (a test checks it), and the target logprobs (``logprobs``), which is what
clients read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from integrations.tinker.types import TinkerRequestError
from trainers.losses import cispo_loss, dro_loss, gspo_loss, importance_sampling_loss, ppo_clip_loss
from trainers.types import LossReduction, PolicyLossConfig

__all__ = [
    "TinkerLossName",
    "SUPPORTED_LOSSES",
    "LossInputs",
    "LossResult",
    "required_inputs",
    "check_loss_request",
    "tinker_loss",
]

TinkerLossName = Literal["cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo"]
#: The ``loss_fn`` values this server computes.
SUPPORTED_LOSSES: tuple[str, ...] = get_args(TinkerLossName)

_RL_INPUTS = ("target_tokens", "logprobs", "advantages")
_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": _RL_INPUTS,
    "ppo": _RL_INPUTS,
    "cispo": _RL_INPUTS,
    "dro": _RL_INPUTS,
    "gspo": _RL_INPUTS,
}
_CLIP_KEYS = ("clip_low_threshold", "clip_high_threshold")
_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "cross_entropy": (),
    "importance_sampling": (),
    "ppo": _CLIP_KEYS,
    "cispo": _CLIP_KEYS,
    "dro": ("beta",),
    "gspo": _CLIP_KEYS,
}
_DEFAULT_LOW, _DEFAULT_HIGH = 0.8, 1.2
_NOT_HERE = {
    "stable_reinforce": "StableReinforce",
    "custom": "server-side custom losses (forward_backward_custom runs client-side and works)",
}


def required_inputs(loss_fn: str) -> tuple[str, ...]:
    """The ``loss_fn_inputs`` keys ``loss_fn`` needs (``target_tokens`` first)."""
    check_loss_request(loss_fn, {})
    return _INPUTS[loss_fn]


def check_loss_request(loss_fn: str, config: Mapping[str, float | str]) -> None:
    """Raise :class:`TinkerRequestError` for a loss this server does not compute or a
    ``loss_fn_config`` key the loss does not take."""
    if loss_fn not in _INPUTS:
        what = _NOT_HERE.get(loss_fn)
        why = f"{what} is not supported by this server" if what else f"unknown loss_fn {loss_fn!r}"
        raise TinkerRequestError(
            f"{why}; supported loss functions: {', '.join(SUPPORTED_LOSSES)} "
            "(or compute the loss client-side with forward_backward_custom)"
        )
    allowed = _CONFIG_KEYS[loss_fn]
    unknown = sorted(k for k in config if k not in allowed)
    if unknown:
        takes = f"takes only {', '.join(allowed)}" if allowed else "takes no loss_fn_config"
        raise TinkerRequestError(f"loss_fn_config keys {unknown} are not accepted: {loss_fn} {takes}")
    for key in allowed:
        if key in config and not isinstance(config[key], int | float):
            raise TinkerRequestError(f"loss_fn_config[{key!r}] must be a number, got {config[key]!r}")


@dataclass(frozen=True)
class LossInputs:
    """One datum's ``loss_fn_inputs`` as tensors of length ``N`` (the model input's length);
    ``cross_entropy`` also takes ``K`` targets per position, ``N x K`` (e.g. a distribution)."""

    target_tokens_N: torch.Tensor
    """int64: the token each position predicts."""
    weights_N: torch.Tensor | None = None
    """float32 (``cross_entropy``): per-token weight."""
    logprobs_N: torch.Tensor | None = None
    """float32 (RL losses): the sampler's logprobs of ``target_tokens``."""
    advantages_N: torch.Tensor | None = None
    """float32 (RL losses): per-token advantage."""


@dataclass(frozen=True)
class LossResult:
    """What :func:`tinker_loss` returns for a batch of datums."""

    loss: torch.Tensor
    """Scalar: the summed loss (with gradient when the logprobs carry one)."""
    elementwise_N: list[torch.Tensor]
    """Per datum, the per-token loss (detached float32, length ``N``)."""


def _policy_config(loss_fn: str, config: Mapping[str, float | str]) -> PolicyLossConfig:
    low = float(config.get("clip_low_threshold", _DEFAULT_LOW))
    high = float(config.get("clip_high_threshold", _DEFAULT_HIGH))
    if loss_fn in ("ppo", "cispo", "gspo") and not (low <= 1.0 <= high):
        raise TinkerRequestError(
            f"{loss_fn}: need clip_low_threshold <= 1 <= clip_high_threshold (ratio bounds such as "
            f"0.8 and 1.2), got {low} and {high}"
        )
    sum_reduction = {"reduction": LossReduction.SEQ_MEAN_TOKEN_SUM_NORM, "norm_constant": 1.0}
    try:
        if loss_fn == "ppo":
            return PolicyLossConfig(eps_low=1.0 - low, eps_high=high - 1.0, **sum_reduction)
        if loss_fn == "cispo":
            return PolicyLossConfig(cispo_eps_low=1.0 - low, cispo_eps_high=high - 1.0, **sum_reduction)
        if loss_fn == "gspo":
            return PolicyLossConfig(gspo_eps_low=1.0 - low, gspo_eps_high=high - 1.0, **sum_reduction)
        if loss_fn == "dro":
            beta = float(config.get("beta", PolicyLossConfig.dro_beta))
            return PolicyLossConfig(dro_beta=beta, **sum_reduction)
        return PolicyLossConfig(**sum_reduction)
    except ValueError as exc:  # the trainer's own range checks (e.g. a lower bound of 0 for ppo)
        raise TinkerRequestError(f"{loss_fn}: invalid loss_fn_config: {exc}") from None


def _elementwise(
    loss_fn: str, lp_N: torch.Tensor, inputs: LossInputs, low: float, high: float, beta: float
) -> torch.Tensor:
    """The per-token loss of one datum, straight from Tinker's definitions (no gradient)."""
    lp_N = lp_N.detach().float()
    if loss_fn == "cross_entropy":
        return -lp_N * inputs.weights_N
    adv_N = inputs.advantages_N
    ratio_N = torch.exp(lp_N - inputs.logprobs_N)  # N
    if loss_fn == "importance_sampling":
        return -ratio_N * adv_N
    if loss_fn == "dro":
        return -(lp_N * adv_N) + 0.5 * beta * (lp_N - inputs.logprobs_N).square()
    if loss_fn == "gspo":
        trained_N = adv_N != 0  # N
        n = int(trained_N.sum())
        log_s = float((lp_N - inputs.logprobs_N)[trained_N].sum()) / max(n, 1)
        ratio_N = torch.full_like(lp_N, math.exp(log_s)) * trained_N  # N: s on trained tokens
    clipped_N = ratio_N.clamp(low, high)  # N
    if loss_fn in ("ppo", "gspo"):
        return -torch.minimum(ratio_N * adv_N, clipped_N * adv_N)
    return -clipped_N * lp_N * adv_N  # cispo


def tinker_loss(
    loss_fn: str,
    target_logprobs_N: Sequence[torch.Tensor],
    inputs: Sequence[LossInputs],
    config: Mapping[str, float | str] | None = None,
) -> LossResult:
    """Tinker's ``loss_fn`` over datums: ``target_logprobs_N[i]`` (with gradient) and ``inputs[i]``
    belong to datum ``i``. Returns the summed loss and each datum's per-token loss."""
    config = dict(config or {})
    check_loss_request(loss_fn, config)
    if len(target_logprobs_N) != len(inputs):
        raise TinkerRequestError(f"{len(target_logprobs_N)} logprob rows for {len(inputs)} datums")
    low = float(config.get("clip_low_threshold", _DEFAULT_LOW))
    high = float(config.get("clip_high_threshold", _DEFAULT_HIGH))
    beta = float(config.get("beta", PolicyLossConfig.dro_beta))
    pcfg = None if loss_fn == "cross_entropy" else _policy_config(loss_fn, config)
    total: torch.Tensor | None = None
    elementwise: list[torch.Tensor] = []
    for lp_N, inp in zip(target_logprobs_N, inputs, strict=True):
        if loss_fn == "cross_entropy":
            w_N = inp.weights_N.to(lp_N.dtype)  # N
            datum_loss = -(lp_N * w_N).sum()
        else:
            lp_1N = lp_N[None]  # 1 x N: one datum, so the sum reduction divides by exactly 1
            old_1N = inp.logprobs_N.to(lp_N.dtype)[None]  # 1 x N
            adv_1N = inp.advantages_N.to(lp_N.dtype)[None]  # 1 x N
            mask_1N = torch.ones_like(lp_1N)  # 1 x N: Tinker sums over every token
            if loss_fn == "gspo":  # GSPO's sequence ratio: the mean over the trained tokens only
                mask_1N = (adv_1N != 0).to(lp_N.dtype)
            fn = {
                "importance_sampling": importance_sampling_loss,
                "ppo": ppo_clip_loss,
                "cispo": cispo_loss,
                "dro": dro_loss,
                "gspo": gspo_loss,
            }
            datum_loss, _ = fn[loss_fn](lp_1N, old_1N, adv_1N, mask_1N, pcfg)
        total = datum_loss if total is None else total + datum_loss
        elementwise.append(_elementwise(loss_fn, lp_N, inp, low, high, beta))
    if total is None:
        total = torch.zeros(())
    return LossResult(loss=total, elementwise_N=elementwise)
