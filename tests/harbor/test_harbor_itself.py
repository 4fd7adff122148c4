"""Harbor's own task loader and linter (Harbor 0.25 in a separate Python 3.12 environment)
accept the bundled tasks and read the same config from them as we do.

Skipped when that environment does not exist; make it with
``python -m harbor_adapter.harbor_env`` (pip install of Harbor into a 3.12 venv)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from harbor_adapter import bundled_tasks_dir, load_tasks
from harbor_adapter.harbor_env import find_harbor_python, harbor_subprocess_env, venv_dir

pytestmark = pytest.mark.slow

READ_TASKS = """
import json, sys, warnings
warnings.simplefilter("error", DeprecationWarning)   # no deprecated keys in our tasks
from harbor.models.task.task import Task
from harbor.models.task.verifier_mode import resolve_step_verifier_mode, resolve_task_verifier_mode
out = {}
for d in sys.argv[1:]:
    t = Task(d)
    c = t.config
    e = c.environment
    out[t.name] = {
        "agent_timeout": c.agent.timeout_sec, "verifier_timeout": c.verifier.timeout_sec,
        "build_timeout": e.build_timeout_sec, "cpus": e.cpus, "memory_mb": e.memory_mb,
        "storage_mb": e.storage_mb, "network_mode": e.network_mode.value, "docker_image": e.docker_image,
        "allowed_hosts": list(e.allowed_hosts or []),
        "instruction": t.instruction.strip(), "has_solution": t.paths.solve_path.exists(),
        "verifier_mode": resolve_task_verifier_mode(c).value,
        "artifacts": [a if isinstance(a, str) else a.source for a in c.artifacts],
        "strategy": c.multi_step_reward_strategy.value if c.multi_step_reward_strategy else None,
        "steps": [
            {
                "name": s.name, "instruction": t.step_instruction(s.name).strip(),
                "agent_timeout": s.agent.timeout_sec, "verifier_timeout": s.verifier.timeout_sec,
                "min_reward": s.min_reward, "verifier_mode": resolve_step_verifier_mode(c, s).value,
                "artifacts": [a if isinstance(a, str) else a.source for a in s.artifacts],
                "has_solution": t.paths.step_solution_dir(s.name).exists(),
            }
            for s in c.steps or []
        ],
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def harbor_python():
    python = find_harbor_python()
    if python is None:
        pytest.skip(f"no Harbor environment in {venv_dir()} (make it: python -m harbor_adapter.harbor_env)")
    return str(python)


def test_harbor_loads_our_tasks_like_we_do(harbor_python):
    ours = {t.name: t for t in load_tasks(bundled_tasks_dir())}
    dirs = [str(t.path) for t in ours.values()]
    proc = subprocess.run(
        [harbor_python, "-c", READ_TASKS, *dirs],
        capture_output=True,
        text=True,
        timeout=300,
        env=harbor_subprocess_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout)
    assert set(theirs) == set(ours)
    for name, h in theirs.items():
        c = ours[name].config
        e = c.environment
        assert h["agent_timeout"] == c.agent.timeout_sec and h["verifier_timeout"] == c.verifier.timeout_sec
        assert (h["build_timeout"], h["cpus"], h["memory_mb"]) == (e.build_timeout_sec, e.cpus, e.memory_mb)
        assert h["storage_mb"] == e.storage_mb and h["docker_image"] == e.docker_image
        assert h["network_mode"] == e.network_mode.value and h["allowed_hosts"] == list(e.allowed_hosts)
        if ours[name].compose is None:
            assert e.network_mode.value == "no-network"
        else:  # stock-check: its own services are the only hosts it may reach, in both
            assert e.network_mode.value == "allowlist"
            assert set(e.allowed_hosts) == {s.name for s in ours[name].compose.services}
        assert h["artifacts"] == [a.source for a in c.artifacts]
        if c.steps:  # Harbor sends no root instruction; ours is the first step's
            assert h["instruction"] == "" and ours[name].instruction == ours[name].steps[0].instruction
            assert h["strategy"] == c.reward_strategy.value
            _same_steps(h, ours[name])
            continue
        assert h["instruction"] == ours[name].instruction and h["has_solution"]
        # where the task states its verifier mode, both read the same; a task that states none
        # but declares artifacts runs separately here (Harbor would share the container)
        stated = c.verifier.environment_mode
        assert h["verifier_mode"] == (stated.value if stated else "shared")
        assert c.verifier_mode() == (stated or ("separate" if c.artifacts else "shared"))
    assert any(t.config.verifier_mode() == "separate" for t in ours.values())  # word-report
    assert any(t.steps for t in ours.values())  # order-steps
    assert any(t.compose is not None for t in ours.values())  # stock-check


def _same_steps(h: dict, task) -> None:
    """Harbor reads a multi-step task's steps as we do."""
    assert [s["name"] for s in h["steps"]] == [s.name for s in task.steps]
    for theirs, step in zip(h["steps"], task.steps, strict=True):
        cfg = step.config
        assert theirs["instruction"] == step.instruction and theirs["has_solution"]
        # a step without its own agent budget has the task's, in both
        assert (theirs["agent_timeout"] or h["agent_timeout"]) == cfg.agent.timeout_sec
        assert cfg.verifier is not None, f"{step.name}: bundled steps state their verifier timeout"
        assert theirs["verifier_timeout"] == cfg.verifier.timeout_sec
        assert theirs["min_reward"] == cfg.min_reward
        assert theirs["artifacts"] == [a.source for a in cfg.artifacts]
        assert theirs["verifier_mode"] == task.config.verifier_mode(step=cfg).value


def test_harbor_lint_finds_nothing_but_the_shared_verifier_note(harbor_python):
    harbor = str(venv_dir() / "bin" / "harbor")
    # Harbor's compose checks run `docker compose` (the plugin); Debian ships the older
    # docker-compose only, so a compose task is linted only where the plugin is
    docker = shutil.which("docker")
    plugin = (
        docker is not None
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    )
    dirs = [str(t.path) for t in load_tasks(bundled_tasks_dir()) if plugin or t.compose is None]
    proc = subprocess.run(
        [harbor, "lint", "--json", *dirs],
        capture_output=True,
        text=True,
        timeout=300,
        env=harbor_subprocess_env(),
    )
    findings = json.loads(proc.stdout)
    # shared-verifier: Harbor suggests a separate verifier container; this adapter runs the
    # verifier in the agent's container after killing its processes (decision 0012)
    other = [f for f in findings if f["rule"] != "shared-verifier"]
    assert not other, other
    assert {f["rule"] for f in findings} <= {"shared-verifier"}


def test_harbor_rejects_what_we_reject(harbor_python, make_task):
    bad = make_task("bad", toml='[environment]\nnetwork_mode = "offline"\n')
    proc = subprocess.run(
        [
            harbor_python,
            "-c",
            "import sys; from harbor.models.task.task import Task; Task(sys.argv[1])",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and "network_mode" in proc.stderr


@pytest.mark.parametrize(
    ("env_table", "mode"),
    [("allow_internet = true", "public"), ("allow_internet = false", "no-network"), ("", None)],
)
def test_older_allow_internet_reads_the_same(harbor_python, make_task, env_table, mode):
    from harbor_adapter import load_task

    root = make_task("legacy", toml=f'[environment]\ndocker_image = "x"\n{env_table}\n')
    code = "import sys; from harbor.models.task.task import Task; print(Task(sys.argv[1]).config.environment.network_mode.value)"
    proc = subprocess.run(
        [harbor_python, "-c", code, str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        env=harbor_subprocess_env(),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = load_task(root).config.environment.network_mode.value
    if mode is None:  # unset: Harbor gives a network, we give none (decision 0012)
        assert (proc.stdout.strip(), ours) == ("public", "no-network")
    else:
        assert proc.stdout.strip() == ours == mode
