import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

import skyrl_gym
from skyrl_gym.gym_bridge import GymnasiumTextEnv, TextSpace
from tests.envs_for_tests import GuessEnv


@pytest.fixture(scope="module", autouse=True)
def guess_registered():
    skyrl_gym.register("guess-gym", "tests.envs_for_tests:GuessEnv")
    yield
    skyrl_gym.deregister("guess-gym")


def test_gymnasium_make_and_checker():
    env = gymnasium.make("skyrl/guess-gym")
    assert isinstance(env.unwrapped, GymnasiumTextEnv)
    gym_check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_reset_step_five_tuple_and_terminated():
    env = gymnasium.make("skyrl/guess-gym", extras={"target": 4, "max_turns": 3})
    obs, info = env.reset(seed=0)
    assert obs == "" and info["messages"][0]["role"] == "user"
    obs, reward, terminated, truncated, info = env.step("<guess>2</guess>")
    assert (obs, reward, terminated, truncated) == ("Higher.", 0.0, False, False)
    obs, reward, terminated, truncated, info = env.step("<guess>4</guess>")
    assert (obs, reward, terminated, truncated) == ("Correct.", 1.0, True, False)


def test_turn_limit_truncates():
    env = gymnasium.make("skyrl/guess-gym", extras={"target": 4, "max_turns": 2})
    env.reset(seed=0)
    assert env.step("nothing")[2:4] == (False, False)
    _, _, terminated, truncated, _ = env.step("nothing")
    assert (terminated, truncated) == (False, True)


def test_turn_limit_inferred_for_published_envs():
    class NoTruncFlag(GuessEnv):
        def step(self, action):
            out = super().step(action)
            out.truncated = None
            return out

    skyrl_gym.register("guess-noflag", NoTruncFlag)
    try:
        env = gymnasium.make("skyrl/guess-noflag", extras={"target": 4, "max_turns": 2})
        env.reset()
        assert env.step("x")[2:4] == (False, False)
        assert env.step("x")[2:4] == (False, True)
        env = gymnasium.make("skyrl/guess-noflag", extras={"target": 4, "max_turns": 1})
        env.reset()
        assert env.step("x")[2:4] == (True, False)  # single-turn: ending is termination
    finally:
        skyrl_gym.deregister("guess-noflag")


def test_text_space_contains_any_unicode():
    space = TextSpace(100)
    assert space.contains("é \x00 \U0001f600 <tool_call>")
    assert not space.contains("x" * 101)
    assert not space.contains(3)
    assert space.contains(space.sample())


def test_step_before_reset():
    env = GymnasiumTextEnv("guess-gym")
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step("x")
