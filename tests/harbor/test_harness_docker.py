"""Harbor's own ``harbor run`` (its Python 3.12 environment) on our plugin environment, and
Harbor's ``terminus-2`` harness against ``skyrl serve`` captured into trainable trajectories.

Skipped where Harbor's environment is missing (make it: ``python -m harbor_adapter.harbor_env``);
``scripts/test.sh`` makes it where pyenv has Python 3.12.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from harbor_adapter.harbor_env import find_harbor_python, harbor_subprocess_env
from harbor_adapter.harness import (
    ENVIRONMENT_IMPORT_PATH,
    LABEL_RUN,
    CapturedTrial,
    HarnessConfig,
    capture_trials,
)
from harbor_adapter.images import ensure_image
from harbor_adapter.loader import bundled_tasks_dir, load_task
from skyrl_gym.errors import ConfigError

pytestmark = pytest.mark.docker

ISOLATION_TEST = """\
# reward 1 only inside the plugin's container profile: loopback only, the task's memory limit
nets=$(ls /sys/class/net | tr '\\n' ' ')
mem=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)
echo "nets=[$nets] mem=$mem" > /logs/verifier/seen.txt
if [ "$nets" = "lo " ] && [ "$mem" = "268435456" ] && [ -f /app/done ]; then r=1; else r=0; fi
echo $r > /logs/verifier/reward.txt
"""


@pytest.fixture(scope="module")
def harbor_bin(base_images) -> Path:
    python = find_harbor_python()
    if python is None:
        pytest.skip("no Harbor environment (make it: python -m harbor_adapter.harbor_env)")
    return python.parent / "harbor"


def _harbor_run(harbor: Path, task: Path, agent: str, jobs: Path) -> dict:
    image, _, _ = ensure_image(load_task(task))
    cmd = [str(harbor), "run", "-p", str(task), "-a", agent, "-e", ENVIRONMENT_IMPORT_PATH]
    cmd += ["--ek", f"image={image}", "-o", str(jobs), "--job-name", agent, "-q", "-y"]
    proc = subprocess.run(cmd, env=harbor_subprocess_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (result,) = (jobs / agent).glob("*/result.json")
    return json.loads(result.read_text())


def _containers(label: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True, timeout=60
    )
    return out.stdout.split()


def test_harbors_oracle_and_nop_in_the_plugin_environment(harbor_bin, make_task, tmp_path):
    """Harbor's own trial pipeline (its oracle and nop agents, its verifier) on our environment
    class: the oracle scores 1, doing nothing 0, the container has only ``lo`` and the task's
    memory limit, and nothing is left running."""
    task = make_task(
        "plugin-check",
        toml='[verifier]\ntimeout_sec = 30.0\n[environment]\ndocker_image = "skyrl-sandbox/minimal:latest"\n'
        'memory_mb = 256\nnetwork_mode = "no-network"\n',
        solve_sh="mkdir -p /app && touch /app/done\n",
        test_sh=ISOLATION_TEST,
    )
    oracle = _harbor_run(harbor_bin, task, "oracle", tmp_path / "jobs")
    nop = _harbor_run(harbor_bin, task, "nop", tmp_path / "jobs")
    seen = next((tmp_path / "jobs" / "oracle").glob("*/verifier/seen.txt")).read_text()
    assert oracle["exception_info"] is None, oracle["exception_info"]
    assert oracle["verifier_result"]["rewards"] == {"reward": 1.0}, seen
    assert "nets=[lo ] mem=268435456" in seen
    assert nop["verifier_result"]["rewards"] == {"reward": 0.0}
    assert _containers("skyrl.harbor.session") == []


def test_a_bundled_task_scores_with_harbors_oracle_on_the_plugin(harbor_bin, tmp_path):
    oracle = _harbor_run(harbor_bin, bundled_tasks_dir() / "hello-file", "oracle", tmp_path / "jobs")
    assert oracle["verifier_result"]["rewards"] == {"reward": 1.0}, oracle["exception_info"]


@pytest.fixture(scope="module")
def tiny_server():
    """``skyrl serve`` on 127.0.0.1 with a tiny random model (gibberish; terminus-2 answers each
    unparsable or truncated reply with an error message, so a trial is many calls)."""
    import torch

    from skyrl_agent.models import load_tokenizer, tiny_random_model
    from skyrl_agent.policies.hf import HFPolicy
    from skyrl_agent.server import ServerConfig, ServerThread

    torch.set_num_threads(2)
    model, tok = tiny_random_model(load_tokenizer())
    policy = HFPolicy(model, tok, seed=0)
    with ServerThread(
        policy, ServerConfig(model_name="tiny", max_model_len=2048, default_max_tokens=48)
    ) as server:
        yield server, tok
    policy.close()


def _terminal_task(root: Path, *, always_pass: bool) -> Path:
    """The bundled hello-file (on the python image, which has the tmux terminus-2 drives); with
    ``always_pass`` its verifier scores 1 whatever the agent did."""
    task = root / "hello-file"
    shutil.copytree(bundled_tasks_dir() / "hello-file", task)
    if always_pass:
        (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    return task


def test_terminus_2_on_skyrl_serve_is_captured_per_trial_and_trains(harbor_bin, tiny_server, tmp_path):
    import torch

    from skyrl_agent.models import tiny_random_model
    from trainers.config import TrainConfig
    from trainers.episodes import train_on_episodes

    server, tok = tiny_server
    cfg = HarnessConfig(agent_kwargs={"max_turns": 2})
    real = _terminal_task(tmp_path / "a", always_pass=False)
    passing = _terminal_task(tmp_path / "b", always_pass=True)
    jobs = tmp_path / "jobs"
    (fail,) = capture_trials(real, server, names=["t-real"], jobs_dir=jobs, cfg=cfg, group_id=7)
    (ok,) = capture_trials(passing, server, names=["t-pass"], jobs_dir=jobs, cfg=cfg, group_id=7)
    for trial, reward in ((fail, 0.0), (ok, 1.0)):
        assert isinstance(trial, CapturedTrial) and not trial.masked, trial.error
        assert trial.reward == reward and trial.rewards == {"reward": reward}
        assert trial.calls > 1 and trial.trajectories, trial
        assert (trial.trial_dir / "agent" / "trajectory.json").is_file()  # Harbor's own record
        for t in trial.trajectories:
            assert t.reward == reward and t.group_id == 7 and not t.masked
            assert len(t.response_ids) == len(t.loss_mask) == len(t.rollout_logprobs)
            assert sum(t.loss_mask) > 0 and t.session.session_id == trial.name
    # the calls are the session's: the first path begins with terminus-2's first prompt
    first_call = server.store.get("t-real")[0]
    root = fail.trajectories[0]
    assert (root.prompt_ids + root.response_ids)[: len(first_call.prompt_ids)] == first_call.prompt_ids
    assert "Create the file" in json.dumps(first_call.messages)
    # terminus-2 summarises when the context fills: that rewrite is a branch of the session
    assert max(t.session.branches for t in fail.trajectories) == len(fail.trajectories)
    # one GRPO step on the two trials' paths (one group: rewards 0 and 1)
    torch.manual_seed(0)
    model, _ = tiny_random_model(tok)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stats = train_on_episodes(
        model,
        opt,
        [fail.trajectories, ok.trajectories],
        TrainConfig(bf16=False, micro_batch_size=1),
        pad_id=tok.pad_token_id,
    )
    assert torch.isfinite(torch.tensor(stats.loss)) and stats.grad_norm > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert _containers(LABEL_RUN) == []


def test_a_trial_past_its_deadline_is_masked_and_cleaned_up(harbor_bin, tiny_server, tmp_path):
    server, _ = tiny_server
    task = _terminal_task(tmp_path, always_pass=True)
    (trial,) = capture_trials(
        task, server, names=["t-late"], jobs_dir=tmp_path / "jobs", cfg=HarnessConfig(timeout_s=4)
    )
    assert trial.masked and trial.reward is None and trial.trajectories == []
    assert "deadline" in (trial.error or "")
    assert _containers(LABEL_RUN) == []


def test_harness_config_is_checked():
    with pytest.raises(ConfigError, match="paths"):
        HarnessConfig(paths="best")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="positive"):
        HarnessConfig(timeout_s=0)


def _reply(keystrokes: str, *, done: bool, duration: float = 1.0) -> str:
    """A reply in terminus-2's JSON format."""
    commands = [{"keystrokes": keystrokes, "duration": duration}] if keystrokes else []
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": done})


@pytest.fixture(scope="module")
def tokenizer():
    from skyrl_agent.models import load_tokenizer

    return load_tokenizer()


def test_a_policy_that_solves_the_task_through_terminus_2_scores_1(harbor_bin, tokenizer, tmp_path):
    """The harness really drives the container: a scripted policy behind ``skyrl serve`` types the
    answer into terminus-2's tmux pane, confirms completion, and Harbor's verifier scores 1."""
    from skyrl_agent.policies.fake import ScriptedPolicy
    from skyrl_agent.server import ServerConfig, ServerThread

    script = [_reply("printf 'hello, harbor\\n' > /app/hello.txt\n", done=True), _reply("", done=True)]
    task = _terminal_task(tmp_path, always_pass=False)
    policy = ScriptedPolicy(tokenizer, script)
    with ServerThread(policy, ServerConfig(model_name="scripted", max_model_len=4096)) as server:
        (trial,) = capture_trials(task, server, names=["t-solve"], jobs_dir=tmp_path / "jobs")
    assert not trial.masked and trial.reward == 1.0, (trial.error, trial.trial_dir)
    assert trial.calls == 2 and len(trial.trajectories) == 1
    (t,) = trial.trajectories
    assert t.num_turns == 2 and t.reward == 1.0 and t.token_rewards[-1] == 1.0
    assert "hello, harbor" in tokenizer.decode(
        [i for i, m in zip(t.response_ids, t.loss_mask, strict=True) if m]
    )


def test_a_reward_file_the_agent_plants_through_terminus_2_is_not_its_score(harbor_bin, tokenizer, tmp_path):
    """Harbor's verifier removes reward files before the tests run, on our environment class too."""
    from skyrl_agent.policies.fake import ScriptedPolicy
    from skyrl_agent.server import ServerConfig, ServerThread

    plant = "echo 1 > /logs/verifier/reward.txt && cp /logs/verifier/reward.txt /logs/agent/planted\n"
    script = [_reply(plant, done=True), _reply("", done=True)]
    task = _terminal_task(tmp_path, always_pass=False)
    with ServerThread(
        ScriptedPolicy(tokenizer, script), ServerConfig(model_name="s", max_model_len=4096)
    ) as server:
        (trial,) = capture_trials(task, server, names=["t-plant"], jobs_dir=tmp_path / "jobs")
    assert not trial.masked and trial.calls == 2, trial.error
    assert (trial.trial_dir / "agent" / "planted").read_text() == "1\n"  # the plant happened
    assert trial.reward == 0.0 and trial.rewards == {"reward": 0.0}


KILL_DRIVER = """
import sys, time
from skyrl_agent.models import load_tokenizer
from skyrl_agent.policies.fake import ScriptedPolicy
from skyrl_agent.server import ServerConfig, ServerThread
from harbor_adapter.harness import HarnessConfig, capture_trials
reply = sys.argv[2]
with ServerThread(ScriptedPolicy(load_tokenizer(), [reply] * 50), ServerConfig(model_name="s")) as server:
    capture_trials(sys.argv[1], server, names=["t-kill"], jobs_dir=sys.argv[3], cfg=HarnessConfig(timeout_s=600))
"""


def test_after_kill_9_of_the_driver_harbor_dies_and_the_reaper_removes_the_container(harbor_bin, tmp_path):
    import os
    import signal
    import sys
    import time

    from skyrl_gym.sandbox.reaper import reap

    task = _terminal_task(tmp_path, always_pass=True)
    busy = _reply("sleep 600\n", done=False, duration=60)
    driver = subprocess.Popen([sys.executable, "-c", KILL_DRIVER, str(task), busy, str(tmp_path / "jobs")])
    try:
        deadline = time.monotonic() + 180
        while not _containers(LABEL_RUN) and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.5)
        (container,) = _containers(LABEL_RUN)
        harbor = subprocess.run(["pgrep", "-f", f"harbor run -c {tmp_path}"], capture_output=True, text=True)
        assert harbor.stdout.split(), "no harbor process while its trial runs"
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    deadline = time.monotonic() + 30  # PR_SET_PDEATHSIG: harbor goes with its driver
    while subprocess.run(["pgrep", "-f", f"harbor run -c {tmp_path}"], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "harbor run outlived its driver"
        time.sleep(0.5)
    assert container in _containers(LABEL_RUN)  # nobody removed it yet: the reaper's job
    report = reap()
    assert any(name.startswith("skyrl-harbor-") for name in report.containers), report
    assert _containers(LABEL_RUN) == []
