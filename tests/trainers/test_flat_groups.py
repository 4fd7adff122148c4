"""Equal-reward groups left out of the update but counted in the loss's mean
(``TrainConfig.count_flat_groups``): the same gradient as training them with zero advantages."""

from __future__ import annotations

import pytest
import torch

from skyrl_agent.types import StopReason, Trajectory
from skyrl_gym.errors import ConfigError
from tests.trainers.test_step import tiny_lm
from trainers.advantages import compute_advantages
from trainers.batch import collate
from trainers.config import TrainConfig
from trainers.loop import kept_share
from trainers.step import train_step

REWARDS = ([1.0, 0.0, 0.2], [0.2, 0.2, 0.2], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0])  # groups 1, 3 flat


def episodes(seed: int = 0) -> list[Trajectory]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for gid, rewards in enumerate(REWARDS):
        prompt = torch.randint(1, 40, (4,), generator=g).tolist()
        for i, r in enumerate(rewards):
            n = 3 + (gid * 3 + i) % 4  # responses of 3 to 6 tokens
            out.append(
                Trajectory(
                    prompt_ids=prompt,
                    response_ids=torch.randint(1, 40, (n,), generator=g).tolist(),
                    loss_mask=[1] * (n - 1) + [0],  # the last token not trained
                    rollout_logprobs=None,
                    token_rewards=[0.0] * (n - 1) + [r],
                    reward=r,
                    stop_reason=StopReason.ENV_DONE,
                    num_turns=1,
                    group_id=gid,
                    sample_index=i,
                )
            )
    return out


def grads(trajs: list[Trajectory], reduction: str, loss_weight: float = 1.0) -> dict[str, torch.Tensor]:
    batch = collate(trajs, pad_id=0)
    batch.advantages_BT = compute_advantages(
        "grpo", batch.mask_BT, rewards_B=batch.rewards_B, group_ids_B=batch.group_ids_B
    ).advantages_BT
    batch.loss_weight = loss_weight
    model = tiny_lm()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: look at the gradients
    cfg = TrainConfig(bf16=False, reduction=reduction, grad_clip=0.0, micro_batch_size=4)
    got: dict[str, torch.Tensor] = {}
    opt.register_step_pre_hook(
        lambda *_: got.update({n: p.grad.detach().clone() for n, p in model.named_parameters()})
    )
    train_step(model, opt, batch, cfg)
    return got


@pytest.mark.parametrize(
    "reduction", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "prompt_mean"]
)
def test_left_out_groups_counted_give_the_gradient_of_training_them(reduction):
    trajs = episodes()
    kept = [t for t in trajs if t.group_id in (0, 2)]
    left = [t for t in trajs if t.group_id in (1, 3)]
    share = kept_share(reduction, collate(kept, pad_id=0), left)
    assert 0 < share < 1
    full = grads(trajs, reduction)  # the flat groups trained, with zero advantages
    scaled = grads(kept, reduction, share)
    plain = grads(kept, reduction)
    assert any(g.abs().sum() > 0 for g in full.values())
    for name, g in full.items():
        assert torch.allclose(scaled[name], g, atol=1e-7, rtol=1e-5), name
        assert torch.allclose(plain[name] * share, g, atol=1e-7, rtol=1e-5), name
    assert not all(torch.allclose(plain[n], full[n], atol=1e-7, rtol=1e-5) for n in full)


def test_kept_share_counts_what_each_reduction_counts():
    trajs = episodes()
    kept = [t for t in trajs if t.group_id in (0, 2)]
    left = [t for t in trajs if t.group_id in (1, 3)]
    batch = collate(kept, pad_id=0)
    tok = lambda ts: sum(sum(t.loss_mask) for t in ts)  # noqa: E731
    assert kept_share("token_mean", batch, left) == pytest.approx(tok(kept) / tok(trajs))
    assert kept_share("seq_mean_token_mean", batch, left) == pytest.approx(6 / 12)
    assert kept_share("prompt_mean", batch, left[:3]) == pytest.approx(2 / 3)
    assert kept_share("token_mean", batch, []) == 1.0


def test_counting_flat_groups_is_off_where_it_would_be_wrong():
    counts = lambda **kw: TrainConfig(**kw).algorithm.counts_flat_groups  # noqa: E731
    assert not counts()  # off by default
    assert counts(count_flat_groups=True) and counts(group_filter="skip_counted")
    assert not counts(count_flat_groups=True, dynamic_sampling=True)
    assert not counts(group_filter="dynamic")
    assert not counts(count_flat_groups=True, advantage="gae")
    with pytest.raises(ConfigError, match="disagree"):
        TrainConfig(group_filter="dynamic", count_flat_groups=True)
