"""Reward integrity and limits, through real containers (tasks on the local minimal image, so
nothing is built): a reward the agent forged is ignored, a bad reward is an error, the agent
never sees the tests or the solution, deadlines hold."""

from __future__ import annotations

import time
import uuid

import docker
import pytest

from harbor_adapter import load_task
from harbor_adapter.agents import run_scripted
from harbor_adapter.env import TerminalEnv, tool_call
from harbor_adapter.errors import ImageBuildError, RewardError, TrialTimeoutError
from harbor_adapter.trial import Trial
from harbor_adapter.types import TrialSettings
from tests.harbor.conftest import TOML

pytestmark = pytest.mark.docker

# the verifier writes a reward only when the agent did the work (/app/done exists)
CONDITIONAL = "[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt\nexit 0\n"


def bash(cmd: str) -> str:
    return tool_call("bash", command=cmd)


SUBMIT = tool_call("submit")


def test_forged_reward_files_and_background_writers_are_ignored(make_task):
    task = load_task(make_task("forge", test_sh=CONDITIONAL))
    forge = [
        bash(
            "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo '{\"reward\": 1}' > /logs/verifier/reward.json"
        ),
        bash(
            "setsid nohup sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
            "sleep 0.02; done' >/dev/null 2>&1 &"
        ),
        bash("sleep 0.3; cat /logs/verifier/reward.txt"),
        SUBMIT,
    ]
    out = run_scripted(task, forge, agent="forger")
    assert out.reward is None
    assert out.error is not None and "RewardError" in out.error and "no reward file" in out.error
    # the same task scores 1 when the work is done, so the error above is the forgery's doing
    honest = run_scripted(task, [bash("mkdir -p /app && touch /app/done"), SUBMIT], agent="honest")
    assert (honest.reward, honest.error) == (1.0, None)


def test_replaced_tools_cannot_forge_the_reward(make_task):
    """The agent is root in its container: it plants a reward and replaces rm and cat. The
    verifier empties /logs/verifier and checks it through the daemon: an error, never the 1."""
    task = load_task(make_task("tools", test_sh=CONDITIONAL))
    forge = [
        bash("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"),
        bash(
            "printf '#!/bin/sh\\nexit 0\\n' > /tmp/noop && chmod +x /tmp/noop && cp /tmp/noop /bin/rm && cp /tmp/noop /bin/cat"
        ),
        SUBMIT,
    ]
    out = run_scripted(task, forge, agent="forger")
    assert out.reward is None and "could not empty /logs/verifier" in out.error


@pytest.mark.parametrize(
    ("test_sh", "message"),
    [
        ("echo nan > /logs/verifier/reward.txt\n", "non-finite"),
        ("echo inf > /logs/verifier/reward.txt\n", "non-finite"),
        ("echo '{\"reward\": NaN}' > /logs/verifier/reward.json\n", "non-finite"),
        (": > /logs/verifier/reward.txt\n", "empty"),
        ("echo passed > /logs/verifier/reward.txt\n", "non-numeric"),
        ("echo no reward written\n", "no reward file"),
        ("exit 3\n", "no reward file"),
    ],
)
def test_bad_reward_is_an_error_not_zero(make_task, test_sh, message):
    task = load_task(make_task("bad", test_sh=test_sh))
    out = run_scripted(task, [SUBMIT], agent="nop")
    assert out.reward is None and out.error is not None and message in out.error
    assert out.metrics["verifier_error"] is True
    # through the env's step, the error is raised (the runtime masks the episode)
    env = TerminalEnv({"max_turns": 2}, {"task_dir": str(task.path)})
    try:
        env.init(None)
        with pytest.raises(RewardError, match=message):
            env.step(SUBMIT)
    finally:
        env.close()


def test_agent_cannot_read_tests_or_solution(make_task):
    secret_test = "SECRET-EXPECTED-ANSWER-31337"
    secret_solution = "SECRET-ORACLE-STEP-4242"
    root = make_task(
        "hidden",
        test_sh=f'# {secret_test}\n[ "$(cat /app/answer 2>/dev/null)" = 42 ] && r=1 || r=0; echo $r > /logs/verifier/reward.txt\n',
        solve_sh=f"# {secret_solution}\nmkdir -p /app && echo 42 > /app/answer\n",
    )
    task = load_task(root)
    env = TerminalEnv({"max_turns": 10}, {"task_dir": str(task.path)})
    seen = []
    try:
        env.init(None)
        for cmd in (
            "ls -la / /tests /solution /logs/verifier 2>&1",
            "find / -xdev \\( -name test.sh -o -name solve.sh \\) 2>/dev/null; echo find-done",
            f"grep -rl -e {secret_test} -e {secret_solution} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; echo grep-done",
        ):
            out = env.step(bash(cmd))
            assert not out.done
            seen.append(out.observations[0]["content"])
        out = env.step(tool_call("read_file", path="/tests/test.sh"))
        seen.append(out.observations[0]["content"])
        text = "\n".join(seen)
        assert "find-done" in text and "grep-done" in text  # the commands ran
        assert secret_test not in text and secret_solution not in text
        assert "test.sh" not in text.replace("/tests/test.sh'", "") and "solve.sh" not in text
        assert "no file '/tests/test.sh'" in text
        out = env.step(bash("mkdir -p /app && echo 42 > /app/answer") + SUBMIT)
        assert out.done and out.reward == 1.0  # the tests arrived after the agent was done
    finally:
        env.close()


def test_command_deadline_and_agent_budget(make_task):
    toml = """\
    [agent]
    timeout_sec = 3
    [environment]
    docker_image = "skyrl-sandbox/minimal:latest"
    """
    task = load_task(make_task("slow", toml=toml, test_sh="echo 0 > /logs/verifier/reward.txt\n"))
    env = TerminalEnv({"max_turns": 10, "command_timeout_s": 1}, {"task_dir": str(task.path)})
    try:
        env.init(None)
        t0 = time.monotonic()
        out = env.step(bash("sleep 30; echo never"))
        took = time.monotonic() - t0
        content = out.observations[0]["content"]
        assert "ran past its deadline" in content and "never" not in content and took < 8
        # the agent budget (3 s) runs out: the episode ends with the verifier's reward
        end = None
        for _ in range(6):
            out = env.step(bash("sleep 1"))
            if out.done:
                end = out
                break
        assert end is not None and end.reward == 0.0 and end.metadata["verifier"]["reward"] == 0.0
        assert env.timings()["agent_seconds"] < 6 and not env.submitted
    finally:
        env.close()


def test_verifier_timeout_is_an_error(make_task):
    toml = """\
    [verifier]
    timeout_sec = 1
    [environment]
    docker_image = "skyrl-sandbox/minimal:latest"
    """
    task = load_task(make_task("vt", toml=toml, test_sh="sleep 20; echo 1 > /logs/verifier/reward.txt\n"))
    t0 = time.monotonic()
    out = run_scripted(task, [SUBMIT])
    assert out.reward is None and "verifier ran past" in out.error and time.monotonic() - t0 < 15


@pytest.mark.parametrize(("mode", "has_eth"), [("no-network", False), ("public", True)])
def test_network_follows_the_task(make_task, mode, has_eth):
    toml = f"""\
    [environment]
    docker_image = "skyrl-sandbox/minimal:latest"
    network_mode = "{mode}"
    """
    task = load_task(make_task(f"net-{mode}", toml=toml))
    with Trial(task) as trial:
        ifaces = trial.run("ls /sys/class/net").stdout.split()
        assert "lo" in ifaces and any(i.startswith("eth") for i in ifaces) == has_eth


def test_limits_reach_the_container(make_task):
    toml = """\
    [environment]
    docker_image = "skyrl-sandbox/minimal:latest"
    memory_mb = 64
    cpus = 0.5
    """
    task = load_task(make_task("lim", toml=toml))
    with Trial(task, TrialSettings(pids=64)) as trial:
        attrs = trial.sandbox.client.api.inspect_container(trial.sandbox.container.id)["HostConfig"]
        assert attrs["Memory"] == 64 * 1024 * 1024 and attrs["NanoCpus"] == 500_000_000
        assert attrs["PidsLimit"] == 64 and attrs["NetworkMode"] == "none"
        hog = trial.run("x=$(head -c 150000000 /dev/zero | tr '\\0' a); echo ${#x}")
        assert hog.exit_code != 0 and "150000000" not in hog.stdout  # killed over 64 MiB


def test_build_deadline_cache_and_missing_image(make_task, base_images):
    from harbor_adapter.images import ensure_image

    toml = """\
    [environment]
    build_timeout_sec = 2
    """
    nonce = uuid.uuid4().hex  # new content: a build that must run
    dockerfile = f"FROM skyrl-sandbox/minimal:latest\nRUN sleep 60 # {nonce}\n"
    slow = load_task(make_task("slowbuild", toml=toml, dockerfile=dockerfile))
    t0 = time.monotonic()
    with pytest.raises(TrialTimeoutError, match="took longer than 2 s"):
        Trial(slow).start()
    assert time.monotonic() - t0 < 10
    time.sleep(1)
    client = docker.from_env()
    try:  # the build's RUN step was stopped, not left running to completion
        running = [
            c
            for c in client.containers.list(ignore_removed=True)
            if nonce in " ".join(c.attrs["Config"]["Cmd"] or [])
        ]
        assert not running
    finally:
        client.close()
    quick = load_task(
        make_task("quick", toml="", dockerfile="FROM skyrl-sandbox/minimal:latest\nRUN echo built > /built\n")
    )
    tag, built, _ = ensure_image(quick)
    assert tag.startswith("skyrl-harbor/quick:")
    tag2, built2, _ = ensure_image(quick)
    assert tag2 == tag and built2 is False  # cached by content hash
    broken = load_task(make_task("nobase", toml="", dockerfile="FROM no-such-registry.example/img:1\n"))
    with pytest.raises(ImageBuildError, match="FROM must name a local image"):
        ensure_image(broken)
    missing = load_task(make_task("noimg", toml='[environment]\ndocker_image = "nope/not-here:1"\n'))
    with pytest.raises(ImageBuildError, match="not on this machine"):
        ensure_image(missing)


SEPARATE_TOML = 'artifacts = ["/app/answer.txt"]\n' + TOML  # the fixture's task, with an artifact
# the test trusts grep's exit status, as tests trust python3 or pytest
GREP_TEST = "if grep -qx 42 /app/answer.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
# an oracle that does not solve the task: it replaces grep with a program that always succeeds
FORGING_ORACLE = (
    "printf '#!/bin/sh\\nexit 0\\n' > /tmp/yes && chmod +x /tmp/yes && cp /tmp/yes \"$(command -v grep)\"\n"
)


def test_a_separate_verifier_is_not_fooled_by_replaced_binaries(make_task):
    from harbor_adapter.check import check_task

    path = make_task("forge-grep", toml=SEPARATE_TOML, test_sh=GREP_TEST, solve_sh=FORGING_ORACLE)
    task = load_task(path)
    assert task.config.verifier_mode() == "separate"  # it declares artifacts and states no mode
    forge = [bash(FORGING_ORACLE.strip()), SUBMIT]
    honest = [bash("mkdir -p /app && echo 42 > /app/answer.txt"), SUBMIT]
    # the naive, shared verifier runs the agent's grep: the forgery passes
    shared = run_scripted(task, forge, agent="forger", env_config={"verifier_mode": "shared"})
    assert (shared.reward, shared.error) == (1.0, None)
    # a separate verifier starts from the image: only /app/answer.txt comes over, and it is absent
    separate = run_scripted(task, forge, agent="forger")
    assert (separate.reward, separate.error) == (0.0, None)
    assert run_scripted(task, honest, agent="honest").reward == 1.0  # the artifact does come over
    # skyrl harbor check: in shared mode the oracle passes there but not with a separate verifier
    verdict = check_task(path, TrialSettings(verifier_mode="shared"))
    assert verdict.oracle.reward == 1.0 and verdict.oracle_separate.reward == 0.0
    assert (
        not verdict.passed and "passes only with the verifier in the agent's container" in verdict.reasons[0]
    )
    verdict = check_task(path)  # auto: separate, where the forging oracle scores 0
    assert not verdict.passed and verdict.reasons == ("oracle scored 0.0, expected 1",)


def test_only_clean_artifacts_reach_a_separate_verifier(make_task):
    toml = SEPARATE_TOML.replace(
        'artifacts = ["/app/answer.txt"]', 'artifacts = [{source = "/app/out", exclude = ["*.tmp"]}]'
    )
    checks = " && ".join(
        [
            '[ -f /app/out/keep ] && [ "$(cat /app/out/keep)" = a ]',
            "[ ! -e /app/out/skip.tmp ]",  # excluded
            "[ ! -L /app/out/link ] && [ ! -e /app/out/link ]",  # links are not carried
            "[ -f /app/out/suid ] && [ ! -u /app/out/suid ]",  # the file, without its setuid bit
            "[ ! -e /app/secret ]",  # not an artifact
            "[ -f /logs/artifacts/note.txt ]",  # Harbor's publish folder always comes over
            "[ ! -e /tmp/agent-was-here ]",  # a fresh container
        ]
    )
    test_sh = (
        f"if {checks}; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
    )
    task = load_task(make_task("clean", toml=toml, test_sh=test_sh))
    work = bash(
        "mkdir -p /app/out && echo a > /app/out/keep && echo b > /app/out/skip.tmp && "
        "ln -s /etc/passwd /app/out/link && cp /bin/true /app/out/suid && chmod u+s /app/out/suid && "
        "echo x > /app/secret && echo n > /logs/artifacts/note.txt && touch /tmp/agent-was-here"
    )
    assert run_scripted(task, [work, SUBMIT], agent="a").reward == 1.0
    # the same checks in the agent's own container fail (the link, the secret, the setuid bit...)
    assert run_scripted(task, [work, SUBMIT], agent="a", env_config={"verifier_mode": "shared"}).reward == 0.0
