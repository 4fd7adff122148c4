"""Turn records (issue 47): what each ``env.step`` answered reaches the trajectory (reward, done,
truncated, metadata, the postprocessed action) with the turn's timings, and an env that ends
an episode on its own limit is recorded as ``env_limit``, not ``env_done``."""

from __future__ import annotations

import asyncio
import json

import pytest

from skyrl_agent.io import load_jsonl, save_jsonl
from skyrl_agent.loop import EpisodeInfo, run_episode
from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.types import RolloutConfig, StopReason, Trajectory, Turn
from skyrl_agent.viewer import LoadedEpisode, render_html
from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput

PROMPT = [{"role": "user", "content": "Call tools until told to stop."}]


class ToolBudgetEnv(BaseTextEnv):
    """Two tool calls allowed; the third ends the episode on the env's own limit. Each step's
    metadata names the call, with a value that is not JSON (a set) and a parsed action."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.calls = 0

    def step(self, action):
        self.calls += 1
        out_of_calls = self.calls > 2
        return BaseTextEnvStepOutput(
            observations=[] if out_of_calls else [{"role": "user", "content": f"result {self.calls}"}],
            reward=0.0 if out_of_calls else 0.25,
            done=out_of_calls,
            truncated=True if out_of_calls else None,
            metadata={"tool": "lookup", "call": self.calls, "seen": {"a"}},
            postprocessed_action=action.strip().upper(),
        )

    def grade(self):
        return 0.5


def _play(tokenizer, env, replies, **cfg):
    traj = asyncio.run(
        run_episode(
            ScriptedPolicy(tokenizer, replies),
            env,
            PROMPT,
            config=RolloutConfig(**cfg),
            info=EpisodeInfo(seed=3),
        )
    )
    traj.validate()
    return traj


def test_each_turn_keeps_what_the_env_said(tokenizer):
    traj = _play(tokenizer, ToolBudgetEnv(), ["look a", "look b", "look c"], max_turns=5)
    assert traj.stop_reason == StopReason.ENV_LIMIT and not traj.masked
    assert [t.done for t in traj.turns] == [False, False, True]
    assert [t.truncated for t in traj.turns] == [None, None, True]
    assert [t.metadata["call"] for t in traj.turns] == [1, 2, 3]
    assert traj.turns[0].metadata["seen"] == "{'a'}"  # not JSON: kept as its text
    assert [t.action for t in traj.turns] == ["LOOK A", "LOOK B", "LOOK C"]
    assert all(t.finish_reason == "stop" for t in traj.turns)
    assert all(t.llm_seconds >= 0 and t.env_seconds >= 0 for t in traj.turns)
    # the turn rewards are the records' rewards; grade() lands on the last of both
    assert [t.reward for t in traj.turns] == traj.turn_rewards == [0.25, 0.25, 0.5]
    assert traj.grade_reward == 0.5 and traj.reward == pytest.approx(1.0)


def test_budget_stops_and_files(tokenizer, tmp_path):
    traj = _play(tokenizer, ToolBudgetEnv(), ["x"], max_turns=2)
    assert traj.stop_reason == StopReason.MAX_TURNS and len(traj.turns) == 2
    assert not any(t.done for t in traj.turns)
    back = load_jsonl(save_jsonl([traj], tmp_path / "t.jsonl"))
    assert back == [traj] and isinstance(back[0].turns[0], Turn)
    line = json.loads(traj.to_json())
    assert line["turns"][0]["metadata"]["tool"] == "lookup"
    # a trajectory line without turns (written before they were recorded) loads with none
    del line["turns"]
    assert Trajectory.from_dict(line).turns == []


def test_the_viewer_shows_the_turns(tokenizer):
    traj = _play(tokenizer, ToolBudgetEnv(), ["look a", "look b", "look c"], max_turns=5)
    page = render_html([LoadedEpisode(traj, "test")])
    assert (
        "<h4>Turns</h4>" in page
        and "done (its limit)" in page
        and "action read as &#x27;LOOK A&#x27;" in page
    )
