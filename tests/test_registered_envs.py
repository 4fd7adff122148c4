"""Every registered env passes our checker and Gymnasium's own checker."""

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

import skyrl_gym

# envs whose example runs in Docker containers (the `docker` mark skips them where no daemon runs)
NEEDS_DOCKER = {"harbor"}
ENV_IDS = [
    pytest.param(s.id, marks=pytest.mark.docker) if s.id in NEEDS_DOCKER else s.id
    for s in skyrl_gym.list_envs()
]


def test_builtin_envs_are_registered():
    ids = {s.id for s in skyrl_gym.list_envs()}
    assert {"gsm8k", "gsm8k_multi_turn", "swe", "harbor"} <= ids


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
