"""An env written only against the published skyrl-gym API runs here unchanged."""

import sys
import textwrap

import pytest

import skyrl_gym

PUBLISHED_ENV = textwrap.dedent(
    """
    import re
    from typing import Any, Dict

    from omegaconf import DictConfig

    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
    from skyrl_gym.tools.core import ToolGroup, tool


    class ArithmeticToolGroup(ToolGroup):
        def __init__(self):
            super().__init__(name="ArithmeticToolGroup")

        @tool
        def multiply(self, a, b):
            return str(int(a) * int(b))


    class MultiplyEnv(BaseTextEnv):
        def __init__(self, env_config: DictConfig, extras: Dict[str, Any] = {}):
            super().__init__()
            assert "reward_spec" in extras, "reward_spec field is required"
            self.ground_truth = extras["reward_spec"]["ground_truth"]
            self.max_turns = extras["max_turns"] if "max_turns" in extras else 5
            self.scale = env_config.scale
            self.init_tool_groups([ArithmeticToolGroup()])

        def _parse_action(self, action: str):
            m = re.search(r"<multiply>(\\d+),(\\d+)</multiply>", action)
            return [m.group(1), m.group(2)] if m else None

        def step(self, action: str) -> BaseTextEnvStepOutput:
            self.turns += 1
            answer = re.search(r"\\\\boxed\\{(.*?)\\}", action)
            if answer:
                reward = self.scale if answer.group(1).strip() == str(self.ground_truth) else 0.0
                return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={})
            done = self.turns >= self.max_turns
            args = self._parse_action(action)
            if args is None:
                obs = "Use <multiply>a,b</multiply> or answer in \\\\boxed{}."
            else:
                obs = self._execute_tool("ArithmeticToolGroup", "multiply", args)
            return BaseTextEnvStepOutput(
                observations=[{"role": "user", "content": obs}], reward=0.0, done=done, metadata={}
            )
    """
)


@pytest.fixture
def published_module(tmp_path, monkeypatch):
    (tmp_path / "published_multiply_env.py").write_text(PUBLISHED_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    skyrl_gym.register(id="multiply", entry_point="published_multiply_env:MultiplyEnv")
    yield
    skyrl_gym.deregister("multiply")
    sys.modules.pop("published_multiply_env", None)


def test_published_env_runs_unchanged(published_module):
    from omegaconf import OmegaConf

    extras = {"reward_spec": {"method": "rule", "ground_truth": 42}, "max_turns": 3}
    env = skyrl_gym.make("multiply", env_config=OmegaConf.create({"scale": 1.0}), extras=extras)
    prompt = [{"role": "user", "content": "What is 6 times 7?"}]
    messages, info = env.init(prompt)
    assert messages == prompt and info == {}
    out = env.step("<multiply>6,7</multiply>")
    assert out["observations"] == [{"role": "user", "content": "42"}]
    assert out["done"] is False and out.get("postprocessed_action") is None
    out = env.step("The answer is \\boxed{42}")
    assert out["reward"] == 1.0 and out["done"] is True
    assert env.get_metrics() == {}
    env.close()
    env.close()


def test_published_env_with_plain_dict_config_passes_check_env(published_module):
    extras = {"reward_spec": {"method": "rule", "ground_truth": 42}, "max_turns": 3}
    env = skyrl_gym.make("multiply", env_config={"scale": 1.0}, extras=extras)
    report = skyrl_gym.check_env(
        env,
        prompt=[{"role": "user", "content": "6*7?"}],
        good_actions=["<multiply>6,7</multiply>", "\\boxed{42}"],
    )
    assert "good actions earn reward" in report.checks


def test_tool_group_published_methods():
    from skyrl_gym.tools.core import ToolGroup, tool

    class G(ToolGroup):
        def __init__(self):
            super().__init__(name="G")

        @tool
        def echo(self, text):
            return text

    g = G()
    assert g.get_name() == "G"
    assert g.get_tool_names() == ["echo"]
    assert g.get_tool("echo")("hi") == "hi"
    assert g.execute_tool("echo", "x") == "x"
    assert g.get_tool_to_group_mapping() == {"echo": "G"}
    with pytest.raises(ValueError, match="Did you mean 'echo'"):
        g.execute_tool("ecko", "x")
