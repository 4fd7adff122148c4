import math

import pytest

from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput, check_env
from skyrl_gym.errors import EnvContractError
from tests.envs_for_tests import GuessEnv


def test_check_env_passes_on_a_correct_env():
    report = check_env(lambda: GuessEnv(extras={"target": 7, "max_turns": 3}))
    assert "seeded determinism" in report.checks
    assert "good actions earn reward" in report.checks
    assert report.episodes >= 12 and report.steps >= report.episodes


class RaisesOnGarbage(GuessEnv):
    def step(self, action):
        if "\x00" in action:
            raise ValueError("cannot parse")
        return super().step(action)


class NeverDone(GuessEnv):
    def step(self, action):
        out = super().step(action)
        out.done = False
        return out


class NanReward(GuessEnv):
    def step(self, action):
        out = super().step(action)
        out.reward = math.nan
        return out


class Nondeterministic(GuessEnv):
    counter = 0

    def step(self, action):
        out = super().step(action)
        Nondeterministic.counter += 1
        out.observations = [{"role": "user", "content": f"call {Nondeterministic.counter}"}]
        return out


class BadMessages(GuessEnv):
    def step(self, action):
        out = super().step(action)
        out.observations = ["not a message"]
        return out


class WrongSolution(GuessEnv):
    def step(self, action):
        out = super().step(action)
        out.reward = 0.0
        return out


class SeededRandom(GuessEnv):
    """Uses self.rng: deterministic under a seed, so it passes."""

    def step(self, action):
        out = super().step(action)
        out.observations[0]["content"] += f" ({self.rng.randint(0, 10**9)})"
        return out


@pytest.mark.parametrize(
    "env_cls, match",
    [
        (RaisesOnGarbage, "raised ValueError"),
        (NeverDone, "not done after max_turns"),
        (NanReward, "NaN"),
        (Nondeterministic, "differ"),
        (BadMessages, "not a dict"),
        (WrongSolution, "good_actions earned total reward 0"),
    ],
)
def test_check_env_catches_contract_breaks(env_cls, match):
    with pytest.raises(EnvContractError, match=match):
        check_env(lambda: env_cls(extras={"target": 7, "max_turns": 3}))


def test_seeded_rng_is_deterministic():
    check_env(lambda: SeededRandom(extras={"target": 7, "max_turns": 3}))


def test_published_style_dict_output_is_accepted():
    class DictEnv(BaseTextEnv):
        def step(self, action):
            self.turns += 1
            return {"observations": [], "reward": 1, "done": True, "metadata": {}}

    check_env(DictEnv)


def test_instance_without_spec_needs_factory():
    with pytest.raises(EnvContractError, match="needs a factory"):
        check_env(GuessEnv())


def test_step_output_reads_like_the_published_typed_dict():
    out = BaseTextEnvStepOutput(observations=[], reward=1.0, done=True, metadata={"a": 1})
    assert out["reward"] == 1.0 and out.get("postprocessed_action") is None
    assert out.get("nope", 5) == 5
    assert "metadata" in out and set(out.keys()) >= {"observations", "reward", "done", "metadata"}
    out["reward"] = 2.0
    assert out.reward == 2.0
    with pytest.raises(KeyError):
        out["nope"]


class _GradeHelperEnv(GuessEnv):
    """A helper named like the runtime's ``grade`` hook but taking an argument (the bug the
    ``code`` env once had: every episode through the runtime failed in ``env.grade()``)."""

    def grade(self, code):
        return 1.0


def test_check_env_refuses_hooks_that_take_arguments():
    with pytest.raises(EnvContractError, match=r"_GradeHelperEnv.grade\(self, code\) must take no arguments"):
        check_env(lambda: _GradeHelperEnv())
