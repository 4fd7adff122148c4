import pytest

from skyrl_agent.evaluation import pass_at_k, summarize
from skyrl_agent.types import StopReason, Trajectory


def _t(group, reward, masked=False, metrics=None):
    return Trajectory(
        prompt_ids=[1],
        response_ids=[2],
        loss_mask=[1],
        rollout_logprobs=None,
        token_rewards=[reward],
        reward=reward,
        stop_reason=StopReason.ENV_DONE,
        num_turns=1,
        masked=masked,
        group_id=group,
        prompt_id=str(group),
        env_metrics=metrics or {},
    )


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)
    assert pass_at_k(4, 0, 3) == 0.0
    assert pass_at_k(3, 2, 2) == 1.0
    with pytest.raises(ValueError, match="at least 5 samples"):
        pass_at_k(4, 1, 5)


def test_summarize_excludes_masked_and_groups_by_prompt():
    trajs = [
        _t(0, 1.0, metrics={"solved": True}),
        _t(0, 0.0, metrics={"solved": False}),
        _t(1, 0.0, metrics={"solved": False}),
        _t(1, 0.0, metrics={"solved": False}),
        _t(1, 1.0, masked=True),  # an infrastructure failure: not a success, not a failure
    ]
    s = summarize(trajs, success_threshold=1.0, ks=(1, 2))
    assert s.episodes == 5 and s.masked == 1 and s.prompts == 2
    assert s.success_rate == pytest.approx(0.25) and s.mean_reward == pytest.approx(0.25)
    assert s.pass_at[1] == pytest.approx((0.5 + 0.0) / 2)
    assert s.pass_at[2] == pytest.approx((1.0 + 0.0) / 2)
    assert s.env_metrics == {"solved": 0.25}
    assert "pass@2" in s.table()
