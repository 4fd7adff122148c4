"""mini-swe-agent as an external harness: its calls served and captured by our server, its commands
run in the SWE task's sandbox, its patch graded by the SWE grader, its episodes trained on."""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("minisweagent")

from integrations.mini_swe_agent import MiniSweConfig, run_episode  # noqa: E402
from skyrl_agent.policies.fake import ScriptedPolicy  # noqa: E402
from skyrl_agent.server.runner import ServerThread  # noqa: E402
from skyrl_agent.server.types import ServerConfig  # noqa: E402
from skyrl_gym.envs.swe import bundled_instances  # noqa: E402
from skyrl_gym.errors import ConfigError  # noqa: E402
from trainers.config import TrainConfig  # noqa: E402
from trainers.episodes import train_on_episodes  # noqa: E402


def block(thought: str, command: str) -> str:
    """A reply in the format of mini-swe-agent's swebench_backticks config."""
    return f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```"


SEE = block("look around", "cat /etc/os-release | head -1; ls /sys/class/net; git status --short | wc -l")
FIX = block(
    "the merge treats touching intervals as separate",
    "sed -i 's/if result and start < result\\[-1\\]\\[1\\]:/if result and start <= result[-1][1]:/' "
    "pocketlib/intervals.py",
)
WRONG = block("guess", "sed -i 's/sorted(intervals)/intervals/' pocketlib/intervals.py")
PATCH = block("make the patch", "git diff -- pocketlib > patch.txt")
SUBMIT = block("submit", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt")


def scripted(tokenizer, plans: dict[str, list[str]]) -> ScriptedPolicy:
    """Replies by the episode (a word of its session's first reply picks the plan) and turn."""

    def script(prompt_ids, index):
        context = tokenizer.decode(list(prompt_ids))
        turn = context.count("<|im_start|>assistant") - 1
        plan = plans["fix"] if "FIXME" not in context else plans["wrong"]
        return plan[min(turn, len(plan) - 1)]

    return ScriptedPolicy(tokenizer, script)


@pytest.fixture(scope="module")
def tokenizer():
    from skyrl_agent.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="module")
def instance():
    return next(i for i in bundled_instances() if "intervals" in i.test_patch)


def tiny_model(tokenizer):
    from skyrl_agent.models import tiny_random_model

    torch.manual_seed(0)
    model, _ = tiny_random_model(tokenizer)
    return model


def test_a_scripted_fix_is_captured_graded_and_trains(tokenizer, instance):
    policy = scripted(tokenizer, {"fix": [SEE, FIX, PATCH, SUBMIT], "wrong": [WRONG, PATCH, SUBMIT]})
    with ServerThread(policy, ServerConfig(model_name="scripted", max_model_len=16384)) as server:
        cfg = MiniSweConfig(base_url=server.url, model="scripted", max_tokens=256)
        good = run_episode(instance, cfg, env_config={"sandbox": "local"}, group_id=7)
        # the same task with a marker in the issue that makes the script guess wrong
        other = dataclasses.replace(instance, problem_statement=instance.problem_statement + " FIXME")
        bad = run_episode(other, cfg, env_config={"sandbox": "local"}, group_id=7)
        assert server.store.get(good.session_id) is None  # collected and forgotten

    assert good.exit_status == "Submitted" and good.patch_source == "submission"
    assert "start <= result[-1][1]" in good.patch and good.reward == 1.0 and good.report.resolved
    assert bad.exit_status == "Submitted" and bad.reward == 0.0 and not bad.report.resolved
    assert not good.masked and not bad.masked
    # the harness sends its whole history each time: one trajectory of all four turns
    [traj] = good.trajectories
    traj.validate()
    assert traj.num_turns == 4 and traj.reward == 1.0 and traj.group_id == 7
    assert traj.token_rewards[traj.turn_spans[-1][1] - 1] == 1.0 and sum(traj.token_rewards) == 1.0
    trained = tokenizer.decode([t for t, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m])
    observed = tokenizer.decode([t for t, m in zip(traj.response_ids, traj.loss_mask, strict=True) if not m])
    assert trained.count("```mswea_bash_command") == 4 and "<returncode>" not in trained
    assert observed.count("<returncode>0</returncode>") == 3  # the observations carry no loss
    assert "PRETTY_NAME=" in observed and "\n0\n</output>" in observed  # ran in a clean checkout
    assert [m["role"] for m in good.messages][-1] == "exit"

    model = tiny_model(tokenizer)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stats = train_on_episodes(
        model,
        opt,
        [good.trajectories, bad.trajectories],
        TrainConfig(bf16=False, micro_batch_size=2, loss="importance_sampling"),
        pad_id=tokenizer.pad_token_id,
    )
    assert torch.isfinite(torch.tensor(stats.loss)) and stats.grad_norm > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_replies_without_an_action_end_the_episode_and_each_call_is_its_own_trajectory(tokenizer, instance):
    # mini-swe-agent drops a reply it cannot parse from the history, so the next call does not
    # extend it: each call is a trajectory of its own, graded with the (empty) working tree
    policy = ScriptedPolicy(tokenizer, lambda ids, i: "I am not sure what to do.")
    with ServerThread(policy, ServerConfig(model_name="scripted", max_model_len=16384)) as server:
        cfg = MiniSweConfig(base_url=server.url, model="scripted", max_consecutive_format_errors=3)
        ep = run_episode(instance, cfg, env_config={"sandbox": "local"})
    assert ep.exit_status == "RepeatedFormatError" and ep.patch_source == "worktree" and ep.patch == ""
    assert ep.report is not None and ep.reward == 0.0 and not ep.masked
    assert len(ep.trajectories) == 3 and all(t.num_turns == 1 for t in ep.trajectories)
    with pytest.raises(ConfigError, match="nothing|no episode"):
        train_on_episodes(
            tiny_model(tokenizer), None, [[]], TrainConfig(bf16=False), pad_id=tokenizer.pad_token_id
        )


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="step_limit"):
        MiniSweConfig(base_url="http://127.0.0.1:1/v1", model="m", step_limit=0)
    with pytest.raises(ConfigError, match="agent_config"):
        from integrations.mini_swe_agent import _agent_and_model

        _agent_and_model(MiniSweConfig(base_url="http://127.0.0.1:1/v1", model="m", agent_config="nope"), "s")


@pytest.mark.docker
def test_the_tiny_model_runs_mini_swe_agent_in_docker_and_its_episode_trains(tokenizer, instance):
    from skyrl_agent.policies.hf import HFPolicy

    model = tiny_model(tokenizer)
    sampler = HFPolicy(model, tokenizer, seed=0)
    env_config = {"sandbox": "docker"}
    try:
        with ServerThread(sampler, ServerConfig(model_name="tiny", max_model_len=8192)) as server:
            cfg = MiniSweConfig(base_url=server.url, model="tiny", max_tokens=24, step_limit=3)
            tiny_ep = run_episode(instance, cfg, env_config=env_config, group_id=0)
            assert server.store.get(tiny_ep.session_id) is None  # collected and forgotten
    finally:
        sampler.close()
    # the random model never writes an action: the agent stops on format errors or the step limit
    assert tiny_ep.exit_status in ("RepeatedFormatError", "LimitsExceeded")
    assert tiny_ep.report is not None and tiny_ep.reward == 0.0 and not tiny_ep.masked
    assert tiny_ep.trajectories and all(t.rollout_logprobs is not None for t in tiny_ep.trajectories)
    assert all(sum(t.loss_mask) > 0 for t in tiny_ep.trajectories)

    # a scripted episode of the same task in the same sandbox kind: it fixes the bug from inside
    # a container whose only network interface is lo
    policy = scripted(tokenizer, {"fix": [SEE, FIX, PATCH, SUBMIT], "wrong": [SUBMIT]})
    with ServerThread(policy, ServerConfig(model_name="scripted", max_model_len=16384)) as server:
        fix_ep = run_episode(
            instance, MiniSweConfig(base_url=server.url, model="scripted"), env_config=env_config, group_id=0
        )
    assert fix_ep.reward == 1.0, fix_ep.report
    [traj] = fix_ep.trajectories
    seen = tokenizer.decode(traj.response_ids[traj.turn_spans[0][1] : traj.turn_spans[1][0]])
    assert "Debian" in seen and "<output>\nPRETTY_NAME" in seen and "\nlo\n0\n" in seen, seen

    # one GRPO step on the group: the tiny model's own tokens get a negative advantage
    before = [p.detach().clone() for p in model.parameters()]
    stats = train_on_episodes(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-3),
        [tiny_ep.trajectories, fix_ep.trajectories],
        TrainConfig(bf16=False, micro_batch_size=2),
        pad_id=tokenizer.pad_token_id,
    )
    assert torch.isfinite(torch.tensor(stats.loss)) and stats.grad_norm > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
