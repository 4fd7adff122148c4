"""The SWE env and grading on Docker, as SWE-bench runs them: instance images built offline
FROM the python base image, a fresh container per grading, no network."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

import skyrl_gym
from skyrl_gym.envs.swe import SWEEnvConfig, grade_patch
from skyrl_gym.envs.swe.cli import main
from tests.envs.swe.conftest import FLIP_HOOK

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module", autouse=True)
def base_image() -> str:
    """The python base image, built offline once (skipped when up to date)."""
    from skyrl_gym.sandbox.images import build_images

    return build_images(["python"], log=lambda line: print(f"[images] {line}"))[0].tag


def my_containers() -> list[str]:
    import docker

    client = docker.from_env()
    try:
        found = client.containers.list(all=True, filters={"label": "skyrl-swe.instance"}, ignore_removed=True)
        return [c.name for c in found if c.labels.get("skyrl.owner.pid") == str(os.getpid())]
    finally:
        client.close()


@pytest.mark.timeout(900)
def test_check_passes_on_every_bundled_task(capsys):
    code = main(["check", "--json", "--workers", "2"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and len(rows) == 13
    for row in rows:
        assert row["ok"] and row["gold_resolved"] and not row["empty_resolved"], row
        assert row["gold"]["f2p_passed"] == row["gold"]["f2p_total"] > 0
        assert row["empty"]["f2p_passed"] == 0
    assert my_containers() == []


def test_a_swesmith_row_unchanged_in_docker(capsys):
    from skyrl_gym.envs.swe.instances import BUNDLED_DIR, BUNDLED_SWESMITH

    first = json.loads(BUNDLED_SWESMITH.read_text().splitlines()[0])["instance_id"]
    code = main(["check", str(BUNDLED_SWESMITH), "--repos", str(BUNDLED_DIR), "--json", "--instance", first])
    (row,) = json.loads(capsys.readouterr().out)
    assert code == 0 and row["ok"] and row["gold_resolved"] and not row["empty_resolved"], row
    assert row["gold"]["p2p_passed"] == row["gold"]["p2p_total"] > 30  # the whole suite ran
    assert my_containers() == []


def test_an_episode_in_the_instance_container(instances):
    from skyrl_gym.envs.swe._runtime import instance_image

    inst = instances[4]  # roman numerals
    later = instances[5].base_commit
    env = skyrl_gym.make("swe", env_config={"sandbox": "docker"}, extras=inst.to_row())
    probe = (
        "pwd; git log --oneline | wc -l; "
        f"git cat-file -e {later} 2>/dev/null && echo FIX-VISIBLE; grep -rc subtractive tests | grep -v ':0'; "
        "ls /sys/class/net | tr '\\n' ' '"
    )
    out = env.step(f"<tool_call>{json.dumps({'name': 'bash', 'arguments': {'command': probe}})}</tool_call>")
    text = out.observations[0]["content"]
    # no history, no hidden tests, and loopback the only network interface
    assert text.startswith("<tool_response>/testbed\n1\nlo "), text
    container = env.workspace.sandbox.name
    assert env.workspace.sandbox.config.image == instance_image(inst, env.source)  # the cached image
    edit = {
        "name": "str_replace",
        "arguments": {
            "path": "pocketlib/roman.py",
            "old_str": "    for ch in text:\n        total += _DIGITS[ch]\n",
            "new_str": "    for i, ch in enumerate(text):\n        value = _DIGITS[ch]\n"
            "        if i + 1 < len(text) and _DIGITS[text[i + 1]] > value:\n            total -= value\n"
            "        else:\n            total += value\n",
        },
    }
    assert env.step(f"<tool_call>{json.dumps(edit)}</tool_call>").metadata["tool_calls"][0]["error"] is None
    final = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    assert final.done and final.reward == 1.0 and final.metadata["resolved"]
    env.close()
    assert container not in my_containers()


def test_reward_hacks_in_docker(instances, make_patch):
    inst = instances[0]
    config = SWEEnvConfig(sandbox="docker")
    hack = make_patch(
        inst,
        {
            "tests/conftest.py": FLIP_HOOK,
            "pocketlib/_hook.py": FLIP_HOOK,
            "pytest.ini": "[pytest]\naddopts = -p pocketlib._hook\n",
        },
    )
    report = grade_patch(inst, hack, config=config)
    assert not report.resolved and set(report.discarded_files) == {"tests/conftest.py", "pytest.ini"}
    fixed = make_patch(inst, {"tests/conftest.py": FLIP_HOOK}, apply_gold=True)
    assert grade_patch(inst, fixed, config=config).resolved


def test_environment_setup_and_install_in_the_image_tiers(instances):
    from tests.envs.swe.test_env import INSTALL, PROBE

    inst = dataclasses.replace(
        instances[6], environment_setup=("echo ready > /opt/env-marker",), install=(INSTALL,)
    )
    with skyrl_gym.make("swe", env_config={"sandbox": "docker"}, extras=inst.to_row()) as env:
        call = {"name": "bash", "arguments": {"command": f"cat /opt/env-marker; {PROBE}"}}
        out = env.step(f"<tool_call>{json.dumps(call)}</tool_call>").observations[0]["content"]
        assert out.startswith("<tool_response>ready\n1\n0\n"), out
        assert env.current_patch() == ""
    assert grade_patch(inst, inst.patch, config=SWEEnvConfig(sandbox="docker")).resolved
