"""The code envs on the Docker backend (strict profile, ``skyrl-sandbox/python``)."""

from __future__ import annotations

import json
import os
import secrets
import time

import pytest

import skyrl_gym
from skyrl_gym.envs.code import load_bundled_rows, reference_of

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def image() -> str:
    """The python base image, built offline once (skipped when up to date)."""
    from skyrl_gym.sandbox.images import build_images

    built = build_images(["python"], log=lambda line: print(f"[images] {line}"))
    return built[0].tag


def block(code: str) -> str:
    return f"```python\n{code}\n```"


def stdin_row(tests):
    return {"reward_spec": {"ground_truth": json.dumps([{"input": i, "output": o} for i, o in tests])}}


def labelled_containers_of_mine() -> list[str]:
    import docker

    from skyrl_gym.sandbox.reaper import list_labelled

    client = docker.from_env()
    try:
        return [
            c.name
            for c in list_labelled(client)["containers"]
            if (c.labels or {}).get("skyrl.owner.pid") == str(os.getpid())
        ]
    finally:
        client.close()


@pytest.mark.timeout(1200)  # the first test may build the image
def test_references_pass_in_docker_and_the_container_goes_away(image):
    before = set(labelled_containers_of_mine())
    for problem_id in ("gcd-lcm", "merge-intervals"):
        row = next(r for r in load_bundled_rows("train") if r["id"] == problem_id)
        env = skyrl_gym.make(
            "code",
            env_config={"sandbox": "docker", "image": image},
            extras={"reward_spec": row["reward_spec"]},
        )
        out = env.step(block(reference_of(problem_id)))
        assert out.reward == 1.0, out.metadata
        assert env._sandbox.workdir == "/workspace"
        env.close()
        env.close()
    assert set(labelled_containers_of_mine()) <= before


def run(code, extras, image, **config):
    env = skyrl_gym.make("code", env_config={"sandbox": "docker", "image": image, **config}, extras=extras)
    try:
        return env.step(block(code))
    finally:
        env.close()


def test_infinite_loop_times_out_in_docker(image):
    start = time.monotonic()
    out = run("while True:\n    pass", stdin_row([("1\n", "1\n")]), image, test_timeout_s=1.0)
    assert out.reward == 0.0 and out.metadata["tests"][0]["timed_out"]
    assert time.monotonic() - start < 1.0 + 5.0  # container start and removal included


def test_fork_and_memory_bombs_are_contained_in_docker(image):
    fork = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    out = run(fork, stdin_row([("1\n", "1\n")]), image, test_timeout_s=2.0, pids=32)
    assert out.reward == 0.0 and out.metadata["tests"][0]["error"] in ("timeout", "runtime_error")
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 ** 2))"
    out = run(hog, stdin_row([("1\n", "1\n")]), image, memory_mb=128)
    assert out.reward == 0.0 and out.metadata["tests"][0]["error"] == "memory", out.metadata


def test_docker_program_has_no_network_and_no_expected_outputs(image):
    secret = f"skyrl-secret-{secrets.token_hex(8)}"
    code = (
        "import os\nprint(sorted(os.listdir('.')))\n"
        "print(sorted(os.listdir('/sys/class/net')))\n"
        "print(os.popen('grep -rls skyrl-secret- / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | head -3').read())"
    )
    # the grep walks the whole image: give it a deadline that holds on a loaded 2-core machine
    out = run(code, stdin_row([("probe\n", secret + "\n")]), image, test_timeout_s=60.0)
    test = out.metadata["tests"][0]
    assert out.reward == 0.0 and test["error"] == "wrong_answer", test
    lines = test["output"].split("\n")
    # isolation is shown from inside: the only network interface is loopback
    assert lines[0] == "['solution.py']" and lines[1] == "['lo']", test["output"]
    # the only file that mentions the marker is the program itself
    assert all(line.endswith("solution.py") or not line for line in lines[2:]), test["output"]
    assert secret not in test["output"]


def test_pooled_containers_are_reused_and_reset_between_episodes(image):
    from skyrl_gym.envs.code import close_shared_pools, sandbox_spec
    from skyrl_gym.sandbox import PooledSandbox, shared_pool

    row = next(r for r in load_bundled_rows("train", env_class="code_multi_turn") if r["id"] == "gcd-lcm")
    config = {"sandbox": "docker", "image": image, "pool_size": 1}
    call = json.dumps({"name": "python", "arguments": {"code": "open('planted.txt', 'w').write('x')"}})
    peek = json.dumps({"name": "python", "arguments": {"code": "import os; print(sorted(os.listdir('.')))"}})
    try:
        env = skyrl_gym.make("code_multi_turn", env_config=config, extras={"reward_spec": row["reward_spec"]})
        # warm the shared pool first, so the first episode leases the pool's own container
        shared_pool(sandbox_spec(env.config).docker_config(), 1).wait_warm(1, timeout=60)
        env.step(f"<tool_call>{call}</tool_call>")
        assert isinstance(env._sandbox, PooledSandbox)
        first = env._sandbox.name
        assert "planted.txt" in env.step(f"<tool_call>{peek}</tool_call>").observations[0]["content"]
        pool = env._sandbox.pool
        env.close()
        pool.wait_warm(1, timeout=60)  # the reset runs in the background
        env = skyrl_gym.make("code_multi_turn", env_config=config, extras={"reward_spec": row["reward_spec"]})
        out = env.step(f"<tool_call>{peek}</tool_call>")
        assert env._sandbox.name == first  # the same warm container...
        assert out.observations[0]["content"].startswith("<tool_response>[]</tool_response>")  # ...emptied
        assert env.step(block(reference_of("gcd-lcm"))).reward == 1.0
        env.close()
        env.close()
    finally:
        close_shared_pools()
    assert first not in labelled_containers_of_mine()
