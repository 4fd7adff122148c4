"""Loading and validating Harbor task folders (no Docker needed)."""

from __future__ import annotations

import pickle

import pytest

from harbor_adapter import (
    HarborTaskError,
    NetworkMode,
    TaskConfigError,
    TaskFileMissingError,
    UnsupportedTaskError,
    bundled_tasks_dir,
    load_task,
    load_tasks,
    parse_task_config,
)
from skyrl_gym.errors import ConfigError, SkyRLError


def test_bundled_tasks_load_and_cover_the_kinds():
    tasks = load_tasks(bundled_tasks_dir())
    names = {t.name for t in tasks}
    assert len(tasks) >= 6
    assert {"fix-median", "git-hotfix", "sales-by-region", "log-levels", "archive-audit"} <= names
    categories = {t.config.metadata["category"] for t in tasks}
    assert {"files", "text-processing", "debugging", "data-wrangling", "git", "multi-step"} <= categories
    for task in tasks:
        solutions = [s.solution_dir for s in task.steps] or [task.solution_dir]
        assert task.dockerfile is not None and all((d / "solve.sh").is_file() for d in solutions)
        # no network, or (a multi-container task) only the task's own services
        want = NetworkMode.NO_NETWORK if task.compose is None else NetworkMode.ALLOWLIST
        assert task.config.environment.network_mode is want
        assert task.config.agent.timeout_sec and task.config.verifier.timeout_sec <= 60
        first = task.dockerfile.read_text().splitlines()[0]
        assert first.startswith("FROM skyrl-sandbox/"), f"{task.name}: images build offline from local bases"


def test_task_fields(make_task):
    root = make_task(
        toml="""\
        schema_version = "1.1"
        [metadata]
        difficulty = "hard"
        [task]
        name = "org/custom"
        [agent]
        timeout_sec = 12
        [verifier]
        timeout_sec = 7.5
        env = { MODE = "strict", N = 3 }
        [environment]
        docker_image = "skyrl-sandbox/minimal:latest"
        cpus = 0.5
        memory_mb = 300
        storage_mb = 100
        workdir = "/srv"
        env = { A = "b" }
        healthcheck = { command = "true" }
        """,
        instruction="<!-- canary GUID 1234 -->\n\nDo it.\n",
    )
    task = load_task(root)
    c = task.config
    assert task.name == "org/custom" and task.instruction == "Do it."
    assert c.agent.budget_s == 12 and c.verifier.timeout_sec == 7.5
    assert dict(c.verifier.env) == {"MODE": "strict", "N": "3"}
    e = c.environment
    assert (e.cpus, e.memory_mb, e.storage_mb, e.workdir, dict(e.env)) == (0.5, 300, 100, "/srv", {"A": "b"})
    assert e.network_mode is NetworkMode.NO_NETWORK and not e.network  # unset: no network
    assert "environment.healthcheck" not in c.ignored and c.environment.healthcheck.command == "true"
    assert c.metadata == {"difficulty": "hard"} and c.schema_version == "1.1"


@pytest.mark.parametrize(
    ("env_table", "mode"),
    [
        ("", NetworkMode.NO_NETWORK),
        ("allow_internet = true", NetworkMode.PUBLIC),
        ("allow_internet = false", NetworkMode.NO_NETWORK),
        ('network_mode = "public"', NetworkMode.PUBLIC),
        ('network_mode = "no-network"\nallow_internet = true', NetworkMode.NO_NETWORK),
        ('network_mode = "allowlist"\nallowed_hosts = ["pypi.org"]', NetworkMode.ALLOWLIST),
    ],
)
def test_network_modes_current_and_older_spelling(env_table, mode):
    cfg = parse_task_config(__import__("tomllib").loads(f"[environment]\n{env_table}\n"))
    assert cfg.environment.network_mode is mode
    assert cfg.environment.network == (mode is NetworkMode.PUBLIC)


def test_legacy_size_keys():
    cfg = parse_task_config({"environment": {"memory": "1G", "storage": "512M"}})
    assert (cfg.environment.memory_mb, cfg.environment.storage_mb) == (1024, 512)
    with pytest.raises(TaskConfigError, match="conflicts"):
        parse_task_config({"environment": {"memory": "1G", "memory_mb": 2048}})
    with pytest.raises(TaskConfigError, match="size like"):
        parse_task_config({"environment": {"memory": "lots"}})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"agent": {"timeout_secs": 5}},
            "unknown key 'timeout_secs' in \\[agent\\].*Did you mean 'timeout_sec'",
        ),
        ({"enviroment": {}}, "unknown key 'enviroment' in the top level.*Did you mean 'environment'"),
        ({"environment": {"memory_gb": 2}}, "Did you mean 'memory_mb'"),
        ({"environment": {"network_mode": "offline"}}, "network_mode='offline'"),
        ({"environment": {"network_mode": "no_network"}}, "Did you mean 'no-network'"),
        ({"verifier": {"timeout_sec": "soon"}}, "must be a number"),
        ({"verifier": {"timeout_sec": -1}}, "must be a positive number"),
        ({"environment": {"memory_mb": 1.5}}, "must be an integer"),
        ({"environment": {"allow_internet": "yes"}}, "true or false"),
        ({"environment": {"allowed_hosts": ["x.org"]}}, "only valid with network_mode = 'allowlist'"),
        ({"agent": 3}, "must be a table"),
        ({"verifier": {"env": {"A": [1]}}}, "table of strings"),
    ],
)
def test_bad_configs_say_how_to_fix(data, message):
    with pytest.raises(TaskConfigError, match=message):
        parse_task_config(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"environment": {"gpus": 1}}, "GPU"),
        ({"environment": {"os": "windows"}}, "only 'linux'"),
        ({"steps": [{"name": "a", "agent": {"user": "bob"}}]}, r"\[steps.agent\].user='bob' differs"),
        (
            {"verifier": {"user": "x"}, "steps": [{"name": "a", "verifier": {"user": "y"}}]},
            "Set \\[verifier\\].user",
        ),
    ],
)
def test_unsupported(data, message):
    with pytest.raises(UnsupportedTaskError, match=message):
        parse_task_config(data)


def test_missing_files(make_task, tmp_path):
    root = make_task("m")
    (root / "instruction.md").unlink()
    with pytest.raises(TaskFileMissingError, match="instruction.md"):
        load_task(root)
    root = make_task("n")
    (root / "tests" / "test.sh").unlink()
    with pytest.raises(TaskFileMissingError, match="tests/test.sh"):
        load_task(root)
    root = make_task("o")
    (root / "task.toml").unlink()
    with pytest.raises(TaskFileMissingError, match="no task.toml"):
        load_task(root)
    root = make_task("p", toml="[agent]\ntimeout_sec = 5\n")
    with pytest.raises(TaskFileMissingError, match="no environment/Dockerfile and no"):
        load_task(root)
    both = make_task(
        "r",
        dockerfile="FROM skyrl-sandbox/minimal\n",
        files={"environment/docker-compose.yaml": "services: {}\n"},
    )
    compose = load_task(both).compose  # a compose file without services: main alone
    assert compose is not None and compose.services == ()
    root = make_task(
        "q", toml="[agent]\ntimeout_sec = 5\n", files={"environment/docker-compose.yaml": "services: {}\n"}
    )
    with pytest.raises(TaskFileMissingError, match="docker-compose.yaml but no environment/Dockerfile"):
        load_task(root)
    with pytest.raises(TaskFileMissingError, match="not a directory"):
        load_task(tmp_path / "nowhere")
    with pytest.raises(TaskFileMissingError, match="no Harbor tasks"):
        load_tasks(tmp_path / "q" / "tests")


def test_bad_toml_and_empty_instruction(make_task):
    root = make_task("b", toml="[agent\ntimeout_sec = 5\n")
    with pytest.raises(TaskConfigError, match="not valid TOML"):
        load_task(root)
    root = make_task("e", instruction="<!-- harbor-canary abc -->\n\n")
    with pytest.raises(HarborTaskError, match="empty"):
        load_task(root)


def test_duplicate_names(make_task, tmp_path):
    toml = '[task]\nname = "same"\n[environment]\ndocker_image = "x"\n'
    make_task("a", toml=toml)
    make_task("b", toml=toml)
    with pytest.raises(HarborTaskError, match="unique"):
        load_tasks(tmp_path)


def test_errors_are_ours_and_builtin_and_pickle():
    for exc in (
        TaskConfigError("x"),
        TaskFileMissingError("y"),
        UnsupportedTaskError("z"),
    ):
        assert isinstance(exc, SkyRLError) and isinstance(exc, ConfigError) and isinstance(exc, ValueError)
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and str(again) == str(exc)
    assert isinstance(TaskFileMissingError("a"), FileNotFoundError)


def test_env_config_errors(make_task):
    from harbor_adapter.env import TerminalEnv

    root = make_task()
    with pytest.raises(ConfigError, match="Did you mean 'command_timeout_s'"):
        TerminalEnv({"command_timeout": 5}, {"task_dir": str(root)})
    with pytest.raises(ConfigError, match="task_dir"):
        TerminalEnv({}, {})
    with pytest.raises(ConfigError, match="Did you mean 't'"):
        TerminalEnv({"tasks_dir": str(root.parent)}, {"task": "tt"})
    env = TerminalEnv({"tasks_dir": str(root.parent), "max_turns": 3}, {"task": "t"})
    assert env.task.path == root and env.max_turns == 3
    assert {s["function"]["name"] for s in env.tool_specs()} == {"bash", "read_file", "write_file", "submit"}
    env.close()


def test_base_images_of_a_dockerfile():
    from harbor_adapter.images import base_images

    text = """
    ARG V=1
    FROM --platform=linux/amd64 skyrl-sandbox/python:latest AS build
    RUN make
    from build
    FROM scratch
    FROM debian:${V}
    FROM skyrl-sandbox/minimal AS final
    COPY --from=build /out /out
    """
    assert base_images(text) == ["skyrl-sandbox/python:latest", "skyrl-sandbox/minimal"]


def test_artifacts_and_the_verifier_mode():
    from harbor_adapter.types import ArtifactSpec, TrialSettings, VerifierMode

    cfg = parse_task_config({"artifacts": ["/app/out.txt", {"source": "/app/dir/", "exclude": ["*.pyc"]}]})
    assert cfg.artifacts == (ArtifactSpec("/app/out.txt"), ArtifactSpec("/app/dir", ("*.pyc",)))
    assert cfg.verifier_mode() is VerifierMode.SEPARATE  # artifacts and no stated mode
    assert cfg.verifier_mode(TrialSettings(verifier_mode="shared").verifier_mode) is VerifierMode.SHARED
    opt_out = parse_task_config({"artifacts": ["/app/out.txt"], "verifier": {"environment_mode": "shared"}})
    assert opt_out.verifier_mode() is VerifierMode.SHARED
    assert parse_task_config({}).verifier_mode() is VerifierMode.SHARED  # nothing to carry over
    table = parse_task_config({"verifier": {"environment": {"docker_image": "checker:1"}}})
    assert table.verifier_mode() is VerifierMode.SEPARATE and table.verifier.docker_image == "checker:1"
    assert "artifacts" not in cfg.ignored
    # a service's artifact parses; load_task checks the task has that service (test_compose.py)
    (art,) = parse_task_config({"artifacts": [{"source": "/x", "service": "db"}]}).artifacts
    assert art.service == "db"
    with pytest.raises(ConfigError, match="verifier_mode"):
        TrialSettings(verifier_mode="both")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"artifacts": "/app/x"}, "must be a list"),
        ({"artifacts": ["app/x"]}, "absolute path"),
        ({"artifacts": ["/app/../etc"]}, "without '..'"),
        ({"artifacts": [{"source": "/x", "colour": 1}]}, "unknown key"),
        ({"artifacts": [{"source": "/x", "exclude": "*.pyc"}]}, "glob patterns"),
        ({"verifier": {"environment_mode": "seperate"}}, "Did you mean 'separate'"),
        ({"verifier": {"environment_mode": "shared", "environment": {}}}, "conflicts"),
        ({"verifier": {"environment": {"dockr_image": "x"}}}, "unknown key"),
    ],
)
def test_bad_artifacts_and_verifier_modes_say_what_is_wrong(data, message):
    with pytest.raises(TaskConfigError, match=message):
        parse_task_config(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"steps": {"name": "a"}}, r"array of tables \(\[\[steps\]\]\)"),
        ({"steps": [{"name": "../up"}]}, "folder name under steps/"),
        ({"steps": [{"name": "a"}, {"name": "A"}]}, "unique"),
        ({"steps": [{"name": "a", "min_rewrd": 1}]}, "Did you mean 'min_reward'"),
        ({"steps": [{"name": "a", "min_reward": "high"}]}, "number or a table of numbers"),
        ({"steps": [{"name": "a", "min_reward": {}}]}, "empty"),
        ({"steps": [{"name": "a", "agent": {"timeout_sec": -1}}]}, "positive"),
        ({"steps": [{"name": "a", "verifier": {"timeout": 3}}]}, "Did you mean 'timeout_sec'"),
        ({"multi_step_reward_strategy": "mean"}, "only for tasks with"),
        ({"multi_step_reward_strategy": "meen", "steps": [{"name": "a"}]}, "Did you mean 'mean'"),
    ],
)
def test_bad_steps_say_how_to_fix(data, message):
    with pytest.raises(TaskConfigError, match=message):
        parse_task_config(data)


def test_steps_take_the_task_sections_where_they_say_nothing():
    from harbor_adapter.types import RewardStrategy, VerifierMode

    cfg = parse_task_config(
        {
            "multi_step_reward_strategy": "final",
            "agent": {"timeout_sec": 50},
            "verifier": {"timeout_sec": 20, "env": {"A": "1"}},
            "steps": [
                {"name": "one", "min_reward": {"reward": 1, "lint": 0.5}},
                {
                    "name": "two",
                    "agent": {"timeout_sec": 5},
                    "verifier": {"env": {"B": "2"}, "environment_mode": "separate"},
                },
            ],
        }
    )
    one, two = cfg.steps
    assert cfg.reward_strategy is RewardStrategy.FINAL
    assert (
        one.agent.budget_s == 50 and one.verifier is None and one.min_reward == {"reward": 1.0, "lint": 0.5}
    )
    assert (
        two.agent.budget_s == 5
        and two.verifier.timeout_sec == 20
        and dict(two.verifier.env) == {"A": "1", "B": "2"}
    )
    assert (
        cfg.verifier_mode(step=one) is VerifierMode.SHARED
        and cfg.verifier_mode(step=two) is VerifierMode.SEPARATE
    )
    assert cfg.verifier_mode("shared", step=two) is VerifierMode.SHARED
    assert one.gate_failure({"reward": 1.0, "lint": 0.7}) is None
    assert "lint=0.2 is below min_reward 0.5" in one.gate_failure({"reward": 1.0, "lint": 0.2})
    assert "lint=-inf" in one.gate_failure({"reward": 1.0})  # a gated key the verifier did not write fails
    assert two.gate_failure({"reward": 0.0}) is None  # no gate


def _multi_step(make_task, steps_toml: str, steps: dict[str, dict[str, str]], name: str = "ms"):
    root = make_task(name, toml='[environment]\ndocker_image = "skyrl-sandbox/minimal:latest"\n' + steps_toml)
    for name, files in steps.items():
        for rel, text in files.items():
            p = root / "steps" / name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    return root


def test_a_multi_step_task_loads_with_its_steps(make_task):
    root = _multi_step(
        make_task,
        '[[steps]]\nname = "a"\n[[steps]]\nname = "b"\n',
        {
            "a": {"instruction.md": "<!-- canary 1 -->\nFirst.\n", "workdir/setup.sh": "true\n"},
            "b": {"instruction.md": "Second.\n", "tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n"},
        },
    )
    task = load_task(root)
    assert [s.name for s in task.steps] == ["a", "b"]
    assert task.instruction == "First." == task.steps[0].instruction  # the root instruction.md is not sent
    assert task.steps[0].setup_script.is_file() and task.steps[1].tests_dir.is_dir()


def test_multi_step_files_are_checked(make_task):
    toml = '[[steps]]\nname = "a"\n'
    with pytest.raises(TaskFileMissingError, match="steps/a/instruction.md"):
        load_task(_multi_step(make_task, toml, {}, "m1"))
    root = _multi_step(
        make_task, toml, {"a": {"instruction.md": "Go.\n"}, "stray": {"instruction.md": "x"}}, "m2"
    )
    with pytest.raises(TaskConfigError, match=r"no \[\[steps\]\] table names: \['stray'\]"):
        load_task(root)
    root = _multi_step(make_task, toml, {"a": {"instruction.md": "Go.\n"}}, "m3")
    (root / "tests" / "test.sh").unlink()
    with pytest.raises(TaskFileMissingError, match="neither steps/a/tests/test.sh nor tests/test.sh"):
        load_task(root)
