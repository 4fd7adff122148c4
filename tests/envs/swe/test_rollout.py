"""SWE episodes through the agent runtime's rollout engine: a scripted policy (every tool, a
real grading) and, in a slow test, the real bundled model (it does not solve the tasks, but
its episodes must come back as trainable trajectories)."""

from __future__ import annotations

import json

import pytest

from skyrl_gym.envs.swe.env import make_prompt, rollout_rows

pytest.importorskip("transformers")

from skyrl_agent.engine import PromptItem, RolloutEngine, load_prompts  # noqa: E402
from skyrl_agent.policies.fake import ScriptedPolicy  # noqa: E402
from skyrl_agent.types import RolloutConfig, StopReason  # noqa: E402


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


FIX_MEDIAN = [
    call("bash", command="grep -n 'def median' -A10 pocketlib/stats.py"),
    call(
        "str_replace",
        path="pocketlib/stats.py",
        old_str="    return ordered[mid]\n",
        new_str="    if n % 2:\n        return ordered[mid]\n    return (ordered[mid - 1] + ordered[mid]) / 2\n",
    ),
    call("bash", command="python3 -c 'from pocketlib.stats import median; print(median([4, 1, 3, 2]))'"),
    call("submit"),
]


@pytest.fixture(scope="module")
def tokenizer():
    from skyrl_agent.models import load_tokenizer

    return load_tokenizer()


def item(instance, **config) -> PromptItem:
    return PromptItem(
        "swe",
        tuple(make_prompt(instance)),
        {"sandbox": "local", "max_turns": 6, **config},
        instance.to_row(),
        instance.instance_id,
    )


def test_scripted_rollout_produces_graded_trajectories(tokenizer, instances, tmp_path):
    def script(prompt_ids, index):  # turn k of each episode, read from its context
        context = tokenizer.decode(list(prompt_ids))
        turn = context.count("<|im_start|>assistant") - 1
        if "median of an even number" not in context:
            return call("submit")  # a policy that gives up at once
        return FIX_MEDIAN[min(turn, len(FIX_MEDIAN) - 1)]

    policy = ScriptedPolicy(tokenizer, script)
    config = RolloutConfig(n_samples=2, max_turns=6, max_tokens_per_turn=256, concurrency=4, env_threads=4)
    rows = rollout_rows([instances[6], instances[3]], {"sandbox": "local", "max_turns": 6})
    (tmp_path / "swe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_prompts(tmp_path / "swe.jsonl")  # what `skyrl rollout --prompts` reads
    assert items[0] == item(instances[6])
    result = RolloutEngine(policy, config, progress=False).run_sync(items)
    trajs = result.trajectories
    assert [t.reward for t in trajs] == [1.0, 1.0, 0.0, 0.0]
    for t in trajs:
        t.validate()
        assert t.stop_reason == StopReason.ENV_DONE and not t.masked and t.env_id == "swe"
        assert t.env_metrics["submitted"]
    solved = trajs[0]
    assert (
        solved.num_turns == 4
        and solved.env_metrics["resolved"]
        and solved.env_metrics["calls_str_replace"] == 1
    )
    assert 0 in solved.loss_mask and 1 in solved.loss_mask  # tool responses are masked out
    text = tokenizer.decode(solved.response_ids)
    assert "2.5" in text and "<tool_response>" in text
    assert result.stats.mean_reward == pytest.approx(0.5)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_bundled_model_produces_trajectories(instances):
    import torch

    from skyrl_agent.models import load_model_and_tokenizer
    from skyrl_agent.policies.hf import HFPolicy
    from skyrl_agent.types import SamplingParams

    torch.set_num_threads(2)
    model, tok = load_model_and_tokenizer()
    policy = HFPolicy(model, tok, seed=0)
    config = RolloutConfig(
        n_samples=2,
        max_turns=2,
        max_tokens_per_turn=24,
        max_context_tokens=1536,
        concurrency=2,
        sampling=SamplingParams(temperature=0.8, max_tokens=24),
    )
    try:
        result = RolloutEngine(policy, config, progress=False).run_sync(
            [item(instances[0], max_turns=2, max_observation_chars=1000)]
        )
    finally:
        policy.close()
    assert len(result.trajectories) == 2 and result.stats.masked == 0
    for t in result.trajectories:
        t.validate()
        assert t.response_ids and t.rollout_logprobs and len(t.rollout_logprobs) == len(t.response_ids)
        assert t.reward in (0.0, 1.0) and 1 <= t.num_turns <= 2
        assert t.stop_reason in (
            StopReason.ENV_DONE,
            StopReason.ENV_LIMIT,
            StopReason.MAX_TURNS,
            StopReason.CONTEXT_LIMIT,
        )
