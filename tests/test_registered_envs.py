"""Every registered env passes our checker and Gymnasium's own checker."""

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

import skyrl_gym

ENV_IDS = [s.id for s in skyrl_gym.list_envs()]


def test_builtin_envs_are_registered():
    assert {"gsm8k", "gsm8k_multi_turn"} <= set(ENV_IDS)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id):
    env_cls = skyrl_gym.spec(env_id).load()
    example = env_cls.example()
    report = skyrl_gym.check_env(
        lambda: skyrl_gym.make(env_id, env_config=dict(example.env_config), extras=dict(example.extras))
    )
    assert "garbage actions give observations" in report.checks
    if example.good_actions:
        assert "good actions earn reward" in report.checks


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env(env_id):
    env = gymnasium.make(f"skyrl/{env_id}")
    try:
        gym_check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()
