import pytest

from skyrl_agent.io import from_dataset, load_jsonl, load_parquet, save_jsonl, save_parquet, to_dataset
from skyrl_agent.types import RolloutConfig, SamplingParams, StopReason, Trajectory
from skyrl_gym.errors import ConfigError


def _traj(**kw):
    base = dict(
        prompt_ids=[1, 2, 3],
        response_ids=[10, 11, 12, 20, 21, 30],
        loss_mask=[1, 1, 1, 0, 0, 1],
        rollout_logprobs=[-0.5, -0.1, -2.0, 0.0, 0.0, -0.3],
        token_rewards=[0.0, 0.0, 0.25, 0.0, 0.0, 1.0],
        reward=1.25,
        stop_reason=StopReason.ENV_DONE,
        num_turns=2,
        turn_rewards=[0.25, 1.0],
        turn_spans=[(0, 3), (5, 6)],
        env_metrics={"solved": True, "nested": {"a": [1, 2]}},
        messages=[{"role": "user", "content": "hi <|im_end|>"}],
        prompt_id="p0",
        group_id=3,
        sample_index=1,
    )
    base.update(kw)
    return Trajectory(**base)


def test_trajectory_roundtrips_through_every_format(tmp_path):
    trajs = [_traj(), _traj(rollout_logprobs=None, masked=True, error="RuntimeError: boom", env_metrics={})]
    for t in trajs:
        t.validate()
    assert load_jsonl(save_jsonl(trajs, tmp_path / "a.jsonl")) == trajs
    assert from_dataset(to_dataset(trajs)) == trajs
    assert load_parquet(save_parquet(trajs, tmp_path / "a.parquet")) == trajs
    t = trajs[0]
    assert t.input_ids == [1, 2, 3, 10, 11, 12, 20, 21, 30]
    assert t.num_generated_tokens == 4


def test_validate_catches_broken_invariants():
    with pytest.raises(ValueError, match="lengths differ"):
        _traj(loss_mask=[1, 1]).validate()
    with pytest.raises(ValueError, match="turn span"):
        _traj(turn_spans=[(2, 5)]).validate()
    with pytest.raises(ValueError, match="rollout_logprobs"):
        _traj(rollout_logprobs=[0.0]).validate()
    with pytest.raises(ValueError, match="unknown Trajectory fields"):
        Trajectory.from_dict({**_traj().to_dict(), "bogus": 1})


def test_configs_reject_bad_values_with_fix():
    with pytest.raises(ConfigError, match="stop=\\('</sql>',\\)"):
        SamplingParams(stop="</sql>")
    with pytest.raises(ConfigError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ConfigError, match="observation_style"):
        RolloutConfig(observation_style="xml")
    with pytest.raises(ConfigError, match="max_turns"):
        RolloutConfig(max_turns=0)
    import pickle

    cfg = RolloutConfig(sampling=SamplingParams(stop=("</sql>",), seed=3))
    assert pickle.loads(pickle.dumps(cfg)) == cfg


def test_package_import_is_light():
    import subprocess
    import sys

    code = "import sys, skyrl_agent; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["False", "False"]
