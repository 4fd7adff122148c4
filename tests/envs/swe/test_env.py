"""The ``swe`` env on the local runtime: tools, observation caps, the final diff, grading."""

from __future__ import annotations

import dataclasses
import json

import pytest

import skyrl_gym
from skyrl_gym.envs.swe import SWEEnvConfig, grade_patch
from skyrl_gym.envs.swe.env import SWEEnv, make_prompt
from skyrl_gym.errors import ConfigError, SandboxError

#: An ``install`` step that writes a module into the package (as a build would).
INSTALL = "python3 -c \"open('pocketlib/_build.py', 'w').write('BUILD = 1')\""
PROBE = "python3 -c 'from pocketlib._build import BUILD; print(BUILD)'; git status --short | wc -l"


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def make(instance, **config):
    return skyrl_gym.make("swe", env_config={"sandbox": "local", **config}, extras=instance.to_row())


def content(out) -> str:
    return out.observations[0]["content"]


def test_tools_view_edit_create_bash(instances):
    inst = instances[0]
    with make(inst) as env:
        messages, info = env.init([])
        assert messages == make_prompt(inst) and info["instance_id"] == inst.instance_id
        listing = content(env.step(call("view", path=".")))
        assert "pocketlib/intervals.py" in listing and ".git" not in listing
        assert "<tool_response>" in listing and "(29 turns left)" in listing
        shown = content(env.step(call("view", path="pocketlib/intervals.py", start_line=8, end_line=10)))
        assert (
            " 8\t        if start > end:" in shown
            and "10\t        if result and start < result[-1][1]:" in shown
        )
        missing = content(
            env.step(call("str_replace", path="pocketlib/intervals.py", old_str="nope", new_str="x"))
        )
        assert "old_str was not found" in missing
        twice = content(
            env.step(call("str_replace", path="pocketlib/intervals.py", old_str="start", new_str="s"))
        )
        assert "occurs" in twice and "times" in twice
        edited = content(
            env.step(
                call(
                    "str_replace",
                    path="pocketlib/intervals.py",
                    old_str="start < result",
                    new_str="start <= result",
                )
            )
        )
        assert "Edited pocketlib/intervals.py" in edited and "start <= result" in edited
        assert "Created notes.txt" in content(env.step(call("create", path="notes.txt", file_text="a\nb\n")))
        assert "exists" in content(env.step(call("create", path="notes.txt", file_text="again")))
        assert "does not exist" in content(env.step(call("view", path="nope.py")))
        ran = content(
            env.step(
                call("bash", command="python3 -m pytest -q tests/test_intervals.py 2>&1 | tail -1; exit 3")
            )
        )
        assert "4 passed" in ran and "[exit code 3]" in ran
        patch = env.current_patch()
        assert "+        if result and start <= result[-1][1]:" in patch and "+++ b/notes.txt" in patch
        out = env.step(call("submit"))
        assert out.done and out.reward == 1.0 and out.truncated is False
        meta = out.metadata
        assert meta["resolved"] and meta["f2p_passed"] == meta["f2p_total"] == 2 and meta["patch"] == patch
        assert {t["name"] for t in meta["tests"]} == set(inst.FAIL_TO_PASS) | set(inst.PASS_TO_PASS)
        metrics = env.get_metrics()
        assert metrics["resolved"] and metrics["submitted"] and metrics["calls_str_replace"] == 3
        assert metrics["tool_errors"] == 4 and metrics["format_errors"] == 0
    assert env._workspace is None  # the agent's sandbox is gone


def test_hidden_tests_and_later_history_are_absent(instances):
    inst = instances[0]
    later = instances[1].base_commit  # the commit that holds this task's fix and tests
    with make(inst) as env:
        out = content(
            env.step(
                call(
                    "bash",
                    command=f"grep -rn touching tests | wc -l; git log --oneline | wc -l; "
                    f"git cat-file -e {later} && echo FIX-VISIBLE; git cat-file -e {inst.base_commit} && echo BASE-VISIBLE; "
                    "git status --short | wc -l",
                )
            )
        )
    assert out.startswith("<tool_response>0\n1\n0\n"), out  # no hidden test, one commit, clean tree
    assert "VISIBLE" not in out


def test_bash_deadline_and_observation_cap(instances):
    with make(instances[0], command_timeout_s=1.0, max_observation_chars=400) as env:
        slow = content(env.step(call("bash", command="echo started; sleep 30")))
        assert "started" in slow and "timed out after 1 s" in slow
        flood = content(env.step(call("bash", command="seq 1 100000")))
        body = flood.split("<tool_response>", 1)[1].split("</tool_response>", 1)[0]
        assert len(body) <= 400 and "characters truncated" in body
        assert body.startswith("1\n2\n") and body.rstrip().endswith("[exit code 0]")


def test_format_errors_and_turn_limit_grade_the_diff(instances):
    inst = instances[6]  # median of an even count
    with make(inst, max_turns=3) as env:
        out = env.step("I will look at stats.py")
        assert not out.done and out.metadata["error"] == "format" and "No tool call" in content(out)
        edit = call(
            "str_replace",
            path="pocketlib/stats.py",
            old_str="    return ordered[mid]\n",
            new_str="    if n % 2:\n        return ordered[mid]\n    return (ordered[mid - 1] + ordered[mid]) / 2\n",
        )
        assert not env.step(edit).done
        last = env.step('<tool_call>{"name": "bash", "arguments": {"command": 1}}</tool_call>')
        assert last.done and last.truncated and last.reward == 1.0 and last.metadata["graded"]
    with make(inst, max_turns=1, grade_on_truncation=False) as env:
        out = env.step(call("bash", command="true"))
        assert out.done and out.reward == 0.0 and out.metadata == {**out.metadata, "graded": False}


def test_untouched_episode_grades_the_empty_patch(instances):
    with make(instances[3], max_turns=1) as env:
        out = env.step("nothing")
        assert out.done and out.reward == 0.0 and out.metadata["patch"] == ""
        assert env._workspace is None  # no sandbox was ever made


def test_a_sandbox_failure_raises_out_of_step(instances):
    with make(instances[0]) as env:
        env.step(call("bash", command="true"))
        env.workspace.sandbox.close()  # the sandbox dies under the env
        with pytest.raises(SandboxError):
            env.step(call("view", path="pocketlib/intervals.py"))


def test_configuration_errors(instances):
    row = instances[0].to_row()
    with pytest.raises(ConfigError, match="unknown sandbox"):
        skyrl_gym.make("swe", env_config={"sandbox": "vm"}, extras=row)
    with pytest.raises(ConfigError, match="is not in"):
        skyrl_gym.make("swe", env_config={"sandbox": "local"}, extras=row | {"base_commit": "f" * 40})
    with pytest.raises(ConfigError, match="SWE-bench fields"):
        SWEEnv({"sandbox": "local"}, None)
    nested = skyrl_gym.make("swe", env_config={"sandbox": "local"}, extras={"instance": row, "max_turns": 4})
    assert nested.instance == instances[0] and nested.max_turns == 4
    nested.close()


def test_check_env_passes():
    example = SWEEnv.example()
    report = skyrl_gym.check_env(
        lambda: skyrl_gym.make("swe", env_config=dict(example.env_config), extras=dict(example.extras))
    )
    assert "good actions earn reward" in report.checks and "seeded determinism" in report.checks


def test_install_output_is_part_of_the_base_not_the_diff(instances):
    inst = dataclasses.replace(instances[6], install=(INSTALL,))
    with skyrl_gym.make("swe", env_config={"sandbox": "local"}, extras=inst.to_row()) as env:
        out = content(env.step(call("bash", command=PROBE)))
        assert out.startswith("<tool_response>1\n0\n"), out  # built, and the tree is clean
        assert env.current_patch() == ""
    assert grade_patch(inst, inst.patch, config=SWEEnvConfig(sandbox="local")).resolved


def test_the_diff_is_against_the_base_even_after_the_agent_commits(instances):
    inst = instances[7]  # slugify
    fix = call(
        "bash",
        command='sed -i \'s/return re.sub(r"\\[^a-z0-9\\]", sep, ascii_text.lower())/'
        'return re.sub(r"[^a-z0-9]+", sep, ascii_text.lower()).strip(sep)/\' pocketlib/text.py && '
        "git -c user.name=a -c user.email=a@b commit -qam fix && git log --oneline | wc -l",
    )
    with make(inst) as env:
        assert content(env.step(fix)).startswith("<tool_response>2\n")
        out = env.step(call("submit"))
        assert out.reward == 1.0 and "+++ b/pocketlib/text.py" in out.metadata["patch"]
    with make(inst) as env:  # a broken .git is the model's doing: graded as no change
        env.step(call("bash", command="rm -rf .git"))
        out = env.step(call("submit"))
        assert out.done and out.reward == 0.0 and out.metadata["error"] == "diff_failed"


def test_a_grading_setup_error_raises_out_of_step_and_masks_the_episode(instances):
    from skyrl_gym.envs.swe import GradingSetupError
    from skyrl_gym.errors import InfrastructureError

    inst = dataclasses.replace(instances[0], PASS_TO_PASS=("tests/test_roman.py::test_no_such_test",))
    with make(inst, max_turns=1) as env:
        with pytest.raises(GradingSetupError, match="test_no_such_test") as info:
            env.step("nothing")
    assert isinstance(info.value, InfrastructureError)  # what the runtime masks
