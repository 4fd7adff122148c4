"""The algorithms together on a real (tiny) autoregressive policy: sample, score, update, learn.

The policy is a bigram language model (an embedding of the previous token to next-token logits)
that samples sequences of 4 tokens from a vocabulary of 8. The reward is the fraction of
sampled tokens equal to 3, so a random policy scores about 1/8. Each combination of estimator and
loss must raise the mean reward well above that within a few dozen updates.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from trainers import (
    KLConfig,
    PolicyLossConfig,
    compute_advantages,
    contiguous_group_ids,
    entropy_bonus_loss,
    entropy_from_logits,
    kl_loss,
    policy_loss,
    token_logprobs_from_logits,
)

V, T, BOS, TARGET = 8, 4, 0, 3


class Bigram(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(V, V)
        nn.init.zeros_(self.table.weight)  # uniform start: reward 1/8 in expectation
        self.value = nn.Embedding(V, 1)  # a critic for GAE: value of the state "previous token"

    def forward(self, inputs_BT: torch.Tensor) -> torch.Tensor:
        return self.table(inputs_BT)  # B x T x V


def sample(policy: Bigram, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``B x T`` and the inputs that predicted them (previous token, BOS first)."""
    prev_B = torch.full((n,), BOS)
    tokens, inputs = [], []
    with torch.no_grad():
        for _ in range(T):
            probs_BV = torch.softmax(policy(prev_B[:, None])[:, 0], -1)
            tok_B = torch.multinomial(probs_BV, 1, generator=gen)[:, 0]
            inputs.append(prev_B)
            tokens.append(tok_B)
            prev_B = tok_B
    return torch.stack(tokens, 1), torch.stack(inputs, 1)


def train(estimator: str, loss_name: str, steps: int = 25) -> tuple[float, float]:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    policy = Bigram()
    reference = copy.deepcopy(policy).requires_grad_(False)
    opt = torch.optim.Adam(policy.parameters(), lr=0.1)
    config = PolicyLossConfig(eps_low=0.2, eps_high=0.28, gspo_eps_low=0.2, gspo_eps_high=0.28)
    kl_config = KLConfig(estimator="k3", coef=0.001)
    groups, group_size = 4, 8
    mask_BT = torch.ones(groups * group_size, T)
    rewards = []
    for _ in range(steps):
        tokens_BT, inputs_BT = sample(policy, groups * group_size, gen)
        rewards_B = (tokens_BT == TARGET).float().mean(1)  # B
        rewards.append(rewards_B.mean().item())
        token_rewards_BT = torch.zeros(groups * group_size, T)
        token_rewards_BT[:, -1] = rewards_B  # the reward sits on the last generated token
        with torch.no_grad():
            old_logp_BT = token_logprobs_from_logits(policy(inputs_BT), tokens_BT)
            ref_logp_BT = token_logprobs_from_logits(reference(inputs_BT), tokens_BT)
            values_BT = policy.value(inputs_BT)[..., 0]
        adv = compute_advantages(
            estimator,
            mask_BT,
            rewards_B=rewards_B,
            group_ids_B=contiguous_group_ids(groups, group_size),
            token_rewards_BT=token_rewards_BT,
            values_BT=values_BT,
        )
        for _epoch in range(2):  # the second pass is off-policy: ratios != 1 and clipping acts
            logits_BTV = policy(inputs_BT)
            logp_BT = token_logprobs_from_logits(logits_BTV, tokens_BT)
            loss, stats = policy_loss(loss_name, logp_BT, old_logp_BT, adv.advantages_BT, mask_BT, config)
            kl, _ = kl_loss(logp_BT, ref_logp_BT, mask_BT, kl_config)
            ent, _ = entropy_bonus_loss(entropy_from_logits(logits_BTV), mask_BT, coef=0.001)
            total = loss + kl + ent
            if adv.returns_BT is not None and estimator == "gae":
                total = total + ((policy.value(inputs_BT)[..., 0] - adv.returns_BT) ** 2).mean()
            opt.zero_grad()
            total.backward()
            opt.step()
        assert stats.num_tokens == groups * group_size * T
    return sum(rewards[:3]) / 3, sum(rewards[-5:]) / 5


@pytest.fixture(autouse=True)
def _one_thread():
    """Tensors this small gain nothing from threads, and lose a lot on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    "estimator, loss_name",
    [
        ("grpo", "ppo_clip"),
        ("dr_grpo", "gspo"),
        ("rloo", "cispo"),
        ("reinforce_pp", "importance_sampling"),
        ("gae", "ppo_clip"),
    ],
)
def test_policy_learns_the_rewarded_token(estimator, loss_name):
    first, last = train(estimator, loss_name)
    assert first < 0.3  # about 1/8 at the start
    assert last > 0.7, f"{estimator}/{loss_name}: mean reward {first:.2f} -> {last:.2f}"


def test_the_readme_example_runs():
    from tests.docs._markdown import example_after

    block = example_after("docs/guides/algorithms.md", "# RL algorithms as functions")
    namespace: dict = {}
    exec(compile(block.code, block.where, "exec"), namespace)
    assert namespace["adv"].stats.num_zero_adv_groups == 1  # the second group scored 0.5 twice
    assert namespace["logprobs_BT"].grad is not None
