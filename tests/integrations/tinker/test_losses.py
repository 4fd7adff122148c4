"""Tinker's summed losses on tiny tensors, against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from integrations.tinker.losses import SUPPORTED_LOSSES, LossInputs, check_loss_request, tinker_loss
from integrations.tinker.types import TinkerRequestError

LN2 = math.log(2.0)


def _rl_datum():
    # target logprobs all -1; sampler logprobs chosen so that ratio = [1, 2, 0.5]
    lp = torch.tensor([-1.0, -1.0, -1.0], requires_grad=True)
    inputs = LossInputs(
        target_tokens_N=torch.tensor([5, 6, 7]),
        logprobs_N=torch.tensor([-1.0, -1.0 - LN2, -1.0 + LN2]),
        advantages_N=torch.tensor([1.0, 1.0, 2.0]),
    )
    return lp, inputs


def test_cross_entropy_is_a_weighted_sum():
    lp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    inputs = LossInputs(target_tokens_N=torch.tensor([1, 2, 3]), weights_N=torch.tensor([1.0, 0.0, 2.0]))
    out = tinker_loss("cross_entropy", [lp], [inputs])
    assert out.loss.item() == pytest.approx(1.0 + 0.0 + 2 * 0.5)
    out.loss.backward()
    assert lp.grad.tolist() == pytest.approx([-1.0, 0.0, -2.0])
    assert out.elementwise_N[0].tolist() == pytest.approx([1.0, 0.0, 1.0])


def test_importance_sampling():
    lp, inputs = _rl_datum()
    out = tinker_loss("importance_sampling", [lp], [inputs])
    assert out.loss.item() == pytest.approx(-(1 * 1 + 2 * 1 + 0.5 * 2))  # -sum(ratio * A)
    out.loss.backward()
    assert lp.grad.tolist() == pytest.approx([-1.0, -2.0, -1.0])  # d(-r A)/dlp = -r A


def test_ppo_clips_the_ratio_with_thresholds():
    lp, inputs = _rl_datum()
    out = tinker_loss("ppo", [lp], [inputs], {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
    # min(rA, clip(r)A): 1, min(2, 1.2) = 1.2, min(1.0, 1.6) = 1.0
    assert out.loss.item() == pytest.approx(-3.2, abs=1e-6)
    out.loss.backward()
    assert lp.grad.tolist() == pytest.approx([-1.0, 0.0, -1.0])  # the clipped token has no gradient
    assert out.elementwise_N[0].tolist() == pytest.approx([-1.0, -1.2, -1.0], abs=1e-6)


def test_ppo_defaults_to_0_8_and_1_2():
    lp, inputs = _rl_datum()
    assert tinker_loss("ppo", [lp], [inputs]).loss.item() == pytest.approx(-3.2, abs=1e-6)


def test_cispo_stops_the_gradient_through_the_clipped_weight():
    lp, inputs = _rl_datum()
    out = tinker_loss("cispo", [lp], [inputs], {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
    # -sum(clip(r) * lp * A) with clip(r) = [1, 1.2, 0.8], lp = -1, A = [1, 1, 2]
    assert out.loss.item() == pytest.approx(1.0 + 1.2 + 1.6, abs=1e-6)
    out.loss.backward()
    assert lp.grad.tolist() == pytest.approx([-1.0, -1.2, -1.6], abs=1e-6)


def test_dro_penalises_the_squared_log_ratio():
    lp, inputs = _rl_datum()
    out = tinker_loss("dro", [lp], [inputs], {"beta": 0.5})
    # -sum(lp * A - 0.5 * beta * (lp - q)^2): lp - q = [0, ln2, -ln2], lp = -1, A = [1, 1, 2]
    assert out.loss.item() == pytest.approx(4.0 + 0.25 * 2 * LN2**2, abs=1e-6)
    out.loss.backward()
    # d/dlp = -A + beta * (lp - q)
    assert lp.grad.tolist() == pytest.approx([-1.0, -1.0 + 0.5 * LN2, -2.0 - 0.5 * LN2], abs=1e-6)
    assert sum(out.elementwise_N[0].tolist()) == pytest.approx(out.loss.item(), abs=1e-6)
    default = tinker_loss("dro", [lp], [inputs]).loss.item()  # beta 0.1 when not sent
    assert default == pytest.approx(4.0 + 0.05 * 2 * LN2**2, abs=1e-6)


def _gspo_datum(advantages):
    # position 0 is the prompt (sampler logprob 0, advantage 0); the trained tokens' log ratios
    # are [0, 0.3, 0], so the sequence ratio is s = exp(0.1)
    lp = torch.tensor([-3.0, -1.0, -1.0, -1.0], requires_grad=True)
    inputs = LossInputs(
        target_tokens_N=torch.tensor([4, 5, 6, 7]),
        logprobs_N=torch.tensor([0.0, -1.0, -1.3, -1.0]),
        advantages_N=torch.tensor(advantages),
    )
    return lp, inputs


def test_gspo_uses_one_length_normalised_ratio_per_datum():
    s = math.exp(0.1)
    lp, inputs = _gspo_datum([0.0, 1.0, 1.0, 2.0])
    out = tinker_loss("gspo", [lp], [inputs])  # bounds 0.8 / 1.2: s is inside
    assert out.loss.item() == pytest.approx(-s * (1 + 1 + 2), abs=1e-5)  # -sum(s * A)
    out.loss.backward()
    # each trained token: -A * s (GSPO's gradient); the prompt: none
    assert lp.grad.tolist() == pytest.approx([0.0, -s, -s, -2 * s], abs=1e-5)
    assert out.elementwise_N[0].tolist() == pytest.approx([0.0, -s, -s, -2 * s], abs=1e-5)
    # with the prompt in the mean, s would be exp(-2.7 / 4) = 0.51 and clipped: no gradient at all


def test_gspo_clips_the_sequence_ratio():
    s = math.exp(0.1)
    bounds = {"clip_low_threshold": 0.9, "clip_high_threshold": 1.05}
    lp, inputs = _gspo_datum([0.0, 1.0, 1.0, 2.0])
    out = tinker_loss("gspo", [lp], [inputs], bounds)  # s = 1.105 > 1.05 with A > 0: clipped
    assert out.loss.item() == pytest.approx(-1.05 * 4, abs=1e-5)
    out.loss.backward()
    assert lp.grad.tolist() == pytest.approx([0.0] * 4, abs=1e-7)
    lp, inputs = _gspo_datum([0.0, -1.0, -1.0, -1.0])  # A < 0: the unclipped term is the minimum
    out = tinker_loss("gspo", [lp], [inputs], bounds)
    assert out.loss.item() == pytest.approx(3 * s, abs=1e-5)
    out.loss.backward()
    assert lp.grad.tolist() == pytest.approx([0.0, s, s, s], abs=1e-5)
    lp, inputs = _gspo_datum([0.0, 0.0, 0.0, 0.0])  # nothing trained: nothing, and no NaN
    out = tinker_loss("gspo", [lp], [inputs])
    assert out.loss.item() == 0.0 and out.elementwise_N[0].tolist() == [0.0] * 4


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo", "dro", "gspo"])
def test_datums_add_up_and_elementwise_sums_to_the_loss(loss_fn):
    torch.manual_seed(0)
    lps, inputs = [], []
    for n in (3, 5):  # ragged datums
        lps.append((torch.randn(n) - 2).requires_grad_())
        inputs.append(
            LossInputs(
                target_tokens_N=torch.zeros(n, dtype=torch.long),
                logprobs_N=torch.randn(n) - 2,
                advantages_N=torch.randn(n),
            )
        )
    both = tinker_loss(loss_fn, lps, inputs).loss.item()
    alone = sum(tinker_loss(loss_fn, [lp], [x]).loss.item() for lp, x in zip(lps, inputs, strict=True))
    assert both == pytest.approx(alone, rel=1e-6)  # a sum, not a mean over datums or tokens
    out = tinker_loss(loss_fn, lps, inputs)
    assert sum(e.sum().item() for e in out.elementwise_N) == pytest.approx(
        out.loss.item(), rel=1e-5, abs=1e-5
    )


def test_unsupported_losses_and_config_keys_say_what_works():
    assert set(SUPPORTED_LOSSES) == {"cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo"}
    with pytest.raises(
        TinkerRequestError,
        match="StableReinforce is not supported.*cross_entropy, importance_sampling, ppo, cispo, dro, gspo",
    ):
        check_loss_request("stable_reinforce", {})
    with pytest.raises(TinkerRequestError, match="dro takes only beta"):
        check_loss_request("dro", {"clip_low_threshold": 0.8})
    with pytest.raises(TinkerRequestError, match="unknown loss_fn 'crossentropy'"):
        check_loss_request("crossentropy", {})
    with pytest.raises(TinkerRequestError, match="cross_entropy takes no loss_fn_config"):
        check_loss_request("cross_entropy", {"clip_low_threshold": 0.8})
    with pytest.raises(TinkerRequestError, match="takes only clip_low_threshold, clip_high_threshold"):
        check_loss_request("ppo", {"beta": 0.1})
    lp, inputs = _rl_datum()
    with pytest.raises(TinkerRequestError, match="clip_low_threshold <= 1 <= clip_high_threshold"):
        tinker_loss("ppo", [lp], [inputs], {"clip_low_threshold": 1.1, "clip_high_threshold": 1.2})
    with pytest.raises(TinkerRequestError, match="gspo: need clip_low_threshold <= 1"):
        tinker_loss("gspo", [lp], [inputs], {"clip_low_threshold": 0.9, "clip_high_threshold": 0.95})
