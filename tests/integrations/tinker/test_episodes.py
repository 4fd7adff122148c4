"""Our multi-turn episodes as Tinker datums (integrations.tinker.episodes): the rows come from
trainers.rows (one per stretch of a rewritten episode), targets are shifted by one, advantages sit
on sampled targets only; and, through the official client and our server, a batch of real
multi-turn episodes trains with importance_sampling at ratio 1 (the sampler's logprobs line up
with the server's)."""

from __future__ import annotations

import dataclasses

import pytest

from integrations.tinker.episodes import episode_loss_inputs
from skyrl_agent.types import Segment, StopReason, Trajectory
from skyrl_gym.errors import ConfigError


def _two_turns() -> Trajectory:
    # prompt 1 2 | turn 1: 10 11 | observation 3 | turn 2: 12
    return Trajectory(
        [1, 2], [10, 11, 3, 12], [1, 1, 0, 1], [-0.1, -0.2, 0.0, -0.3], [0, 0, 0, 1.0], 1.0,
        StopReason.ENV_DONE, num_turns=2, turn_rewards=[0.0, 1.0], turn_spans=[(0, 2), (3, 4)],
    )  # fmt: skip


def test_rows_targets_and_advantages_of_episodes():
    rewritten = Trajectory(
        [1, 7], [20, 21], [1, 1], [-0.5, -0.6], [0, 1.0], 1.0, StopReason.ENV_DONE,
        num_turns=2, turn_rewards=[0.0, 1.0], turn_spans=[(0, 2)], context_strategy="drop_observations",
        segments=[Segment([1, 2], [10, 11, 3], [1, 1, 0], [-0.1, -0.2, 0.0], [(0, 2)])], context_rewrites=1,
    )  # fmt: skip
    masked = Trajectory([1, 2], [5], [1], [-1.0], [0.0], 0.0, StopReason.ENV_ERROR, masked=True)
    rows = episode_loss_inputs([_two_turns(), masked, rewritten], [0.5, 9.0, -2.0])
    assert [r["episode"] for r in rows] == [0, 2, 2]  # the masked episode gives none; two stretches
    first = rows[0]
    assert first["tokens"] == [1, 2, 10, 11, 3] and first["target_tokens"] == [2, 10, 11, 3, 12]
    assert first["logprobs"] == [0.0, -0.1, -0.2, 0.0, -0.3]
    assert first["advantages"] == [0.0, 0.5, 0.5, 0.0, 0.5]  # not the prompt's, not the observation's
    assert rows[1]["target_tokens"] == [2, 10, 11, 3] and rows[1]["advantages"] == [0.0, -2.0, -2.0, 0.0]
    assert rows[2]["target_tokens"] == [7, 20, 21] and rows[2]["advantages"] == [0.0, -2.0, -2.0]
    # step-wise: one row per turn, each with the context before it
    steps = episode_loss_inputs([_two_turns()], [1.0], step_wise=True)
    assert [r["target_tokens"] for r in steps] == [[2, 10, 11], [2, 10, 11, 3, 12]]
    assert [sum(r["advantages"]) for r in steps] == [2.0, 1.0]
    with pytest.raises(ConfigError, match="2 advantages for 1 episodes"):
        episode_loss_inputs([_two_turns()], [1.0, 2.0])
    with pytest.raises(ConfigError, match="no sampler logprobs"):
        episode_loss_inputs([dataclasses.replace(_two_turns(), rollout_logprobs=None)], [1.0])


@pytest.mark.slow
def test_real_episodes_train_through_the_official_client_at_ratio_one(tmp_path):
    tinker = pytest.importorskip("tinker", reason="the tinker client is not installed (the `tinker` extra)")
    import numpy as np

    from integrations.tinker import TINY_RANDOM_MODEL, TinkerServer, TinkerServerConfig
    from integrations.tinker.episodes import episode_datums
    from skyrl_agent.engine import PromptItem, RolloutEngine
    from skyrl_agent.models import tiny_random_model
    from skyrl_agent.policies.hf import HFPolicy
    from skyrl_agent.types import RolloutConfig, SamplingParams
    from skyrl_gym.envs.kvchain import generate_kvchain_rows

    # the server's tiny-random base with fresh LoRA adapters (B = 0) is this model: the sampler's
    # logprobs are the training client's
    model, tok = tiny_random_model()
    policy = HFPolicy(model, tok, seed=0)
    rows = generate_kvchain_rows(2, examples=0)
    items = [PromptItem("kvchain", r["prompt"], {}, {k: v for k, v in r.items() if k != "prompt"}, str(i))
             for i, r in enumerate(rows)]  # fmt: skip
    cfg = RolloutConfig(
        max_turns=3, n_samples=2, sampling=SamplingParams(max_tokens=6, temperature=1.0), seed=0
    )
    try:
        episodes = RolloutEngine(policy, cfg, progress=False).run_sync(items).trajectories
    finally:
        policy.close()
    assert len(episodes) == 4 and max(t.num_turns for t in episodes) >= 2  # observations in the rows
    advantages = [1.0, -1.0, 0.5, 2.0]
    inputs = episode_loss_inputs(episodes, advantages)
    datums = episode_datums(episodes, advantages)
    config = TinkerServerConfig(checkpoint_dir=str(tmp_path / "ckpt"))
    with TinkerServer(config) as srv:
        service = tinker.ServiceClient(base_url=srv.url, api_key="tml-local-test")
        try:
            training = service.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=0).result()
            out = training.forward_backward(datums, "importance_sampling").result()
        finally:
            service.close("success").result()
    want = [-np.array(r["advantages"]) for r in inputs]  # ratio 1: -advantage on each sampled target
    assert out.metrics["loss:sum"] == pytest.approx(sum(w.sum() for w in want), rel=1e-3, abs=1e-3)
    for got, w in zip(out.loss_fn_outputs, want, strict=True):
        assert np.allclose(got["elementwise_loss"].to_numpy(), w, atol=1e-3)
