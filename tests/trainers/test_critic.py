"""The critic: the clipped value loss by hand, the value head in the train step, GAE end to end."""

import json

import pytest
import torch

from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput
from tests.trainers.test_step import make_batch, tiny_lm
from trainers.config import TrainConfig
from trainers.critic import ValueHead, score_values
from trainers.losses import value_loss
from trainers.step import train_step

V_BT = [[1.0, 0.5, 1.2, 9.0]]
OLD_BT = [[0.5, 0.5, 0.5, 0.0]]
RET_BT = [[0.0, 1.0, 1.0, 0.0]]
MASK_BT = [[1.0, 1.0, 1.0, 0.0]]  # the 9.0 sits on an untrained position


def test_clipped_value_loss_by_hand():
    v = torch.tensor(V_BT, requires_grad=True)
    loss, stats = value_loss(
        v, torch.tensor(OLD_BT), torch.tensor(RET_BT), torch.tensor(MASK_BT), clip_eps=0.2
    )
    # token 0: (1.0-0)^2 = 1.00 vs clip 0.7 -> 0.49: unclipped wins, 0.5 * 1.00 = 0.500
    # token 1: (0.5-1)^2 = 0.25, v = v_old so clip is the same:    0.5 * 0.25 = 0.125
    # token 2: (1.2-1)^2 = 0.04 vs clip 0.7 -> (0.7-1)^2 = 0.09:    0.5 * 0.09 = 0.045 (clipped)
    assert loss.item() == pytest.approx((0.5 + 0.125 + 0.045) / 3)
    loss.backward()
    # d/dv 0.5 (v-R)^2 = v - R, over 3 tokens; the clipped token and the masked one get nothing
    assert v.grad[0].tolist() == pytest.approx([1.0 / 3, -0.5 / 3, 0.0, 0.0])
    assert stats.clip_frac == pytest.approx(1 / 3)
    assert stats.value_mean == pytest.approx(0.9) and stats.returns_mean == pytest.approx(2 / 3)
    # explained variance: Var(R) = 2/9, Var(R - v) = Var([-1, 0.5, -0.2]) = 0.37556
    assert stats.explained_variance == pytest.approx(1 - 0.375556 / (2 / 9), abs=1e-4)


def test_unclipped_value_loss_and_sequence_reduction():
    args = (torch.tensor(V_BT), torch.tensor(OLD_BT), torch.tensor(RET_BT), torch.tensor(MASK_BT))
    loss, stats = value_loss(*args, clip_eps=None)
    assert float(loss) == pytest.approx((0.5 + 0.125 + 0.02) / 3) and stats.clip_frac == 0.0
    two = [torch.cat([a, a]) for a in args]
    two[3][1] = torch.tensor([1.0, 0.0, 0.0, 0.0])  # second sequence: only token 0 trained
    loss, _ = value_loss(*two, clip_eps=0.2, reduction="seq_mean_token_mean")
    assert float(loss) == pytest.approx(((0.5 + 0.125 + 0.045) / 3 + 0.5) / 2)


def test_value_head_learns_the_returns_in_train_step():
    model = tiny_lm()
    critic = ValueHead(model.config.hidden_size)
    batch = make_batch()
    batch.returns_BT = 0.7 * batch.mask_BT  # every trained token is worth 0.7
    batch.advantages_BT = torch.zeros_like(batch.mask_BT)  # only the value loss moves the weights
    opt = torch.optim.AdamW(list(model.parameters()) + list(critic.parameters()), lr=1e-2)
    cfg = TrainConfig(micro_batch_size=2, bf16=False, advantage="gae", value_clip=0.2)
    losses = []
    for _ in range(10):
        batch.old_values_BT = score_values(model, critic, batch, 2, bf16=False)
        losses.append(train_step(model, opt, batch, cfg, critic=critic).extra["value_loss"])
    assert losses[0] == pytest.approx(0.5 * 0.7**2, rel=1e-4)  # the head starts at zero
    assert losses[-1] < 0.2 * losses[0]
    values = score_values(model, critic, batch, 2, bf16=False)
    m = batch.mask_BT.bool()
    assert ((values[m] - 0.7) ** 2).mean() < 0.2 * 0.7**2  # from 0 to near the target
    assert torch.all(values[~m] == 0)


def test_train_step_needs_returns_for_a_critic():
    model = tiny_lm()
    with pytest.raises(ValueError, match="returns_BT"):
        train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), make_batch(), TrainConfig(),
                   critic=ValueHead(model.config.hidden_size))  # fmt: skip


class LengthEnv(BaseTextEnv):
    """One turn; the reward depends on the length of the answer, so a random model gets varied rewards."""

    def step(self, action: str) -> BaseTextEnvStepOutput:
        return BaseTextEnvStepOutput(observations=[], reward=(len(action) % 5) / 4, done=True, metadata={})


@pytest.mark.slow
def test_gae_trains_a_critic_end_to_end(tmp_path):
    import skyrl_gym
    from skyrl_agent.models import tiny_random_model
    from trainers.loop import train

    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"prompt": [{"role": "user", "content": f"say {i}"}]}) + "\n" for i in range(8))
    )
    skyrl_gym.register("trainer-length", "tests.trainers.test_critic:LengthEnv")
    try:
        cfg = TrainConfig(
            env="trainer-length", data=str(rows), model=str(tmp_path / "model"), run_dir=str(tmp_path / "run"),
            advantage="gae", steps=4, prompts_per_step=2, group_size=4, train_prompts=0, eval_prompts=0,
            max_turns=1, max_tokens_per_turn=8, stop=(), checkpoint_every=2, bf16=False, lr=2e-2,
            skip_equal_reward_groups=False, temperature=1.0, progress=False, threads=1,
        )  # fmt: skip
        train(cfg)
    finally:
        skyrl_gym.deregister("trainer-length")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(r["value_loss"] > 0 for r in records)  # the rewards vary, the critic has targets
    assert records[-1]["value_loss"] < records[0]["value_loss"]
    critic = torch.load(tmp_path / "run" / "checkpoints" / "step_000004" / "critic.pt")
    assert critic["linear.weight"].abs().sum() > 0  # the head moved off its zero start
