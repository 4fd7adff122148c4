"""The user's own env from the command line, with no package to install: ``--env module:Class``
and ``--import MODULE`` on ``skyrl envs``, ``eval``, ``rollout`` and ``train``.

The env is written the published skyrl-gym way (``skyrl_gym.envs.base_text_env`` imports, a
``step`` that returns ``BaseTextEnvStepOutput``) in a package in a scratch directory, the rows in
the published Parquet columns (``data_source``, ``prompt``, ``env_class``, ``reward_spec``,
``extra_info``), and the commands run as a user would type them there: ``skyrl`` in a fresh
process whose current directory is the scratch directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.cli import main as skyrl_main
from skyrl_gym.errors import ConfigError, EnvNotFoundError

SKYRL = Path(sys.executable).with_name("skyrl")
ENTRY = "guess_pkg.envs:GuessEnv"

ENV_MODULE = textwrap.dedent(
    '''
    from typing import Any, Dict

    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput


    class GuessEnv(BaseTextEnv):
        """Say the secret word; two tries."""

        def __init__(self, env_config: Any = None, extras: Dict[str, Any] = {}):
            super().__init__()
            assert "reward_spec" in extras, "reward_spec field is required"
            self.ground_truth = extras["reward_spec"]["ground_truth"]
            self.max_turns = extras["max_turns"] if "max_turns" in extras else 2

        def step(self, action: str) -> BaseTextEnvStepOutput:
            self.turns += 1
            solved = self.ground_truth in action
            done = solved or self.turns >= self.max_turns
            observations = [] if done else [{"role": "user", "content": "No. Try again."}]
            return BaseTextEnvStepOutput(
                observations=observations, reward=float(solved), done=done, metadata={}
            )


    class NotAnEnv:
        """A class, but no env."""


    def helper():
        return 1
    '''
)

REGISTERING_MODULE = textwrap.dedent(
    """
    import skyrl_gym

    skyrl_gym.register("guess-word", "guess_pkg.envs:GuessEnv")
    """
)


def _rows(env_classes: list[str | None]) -> list[dict]:
    words = ["apple", "river", "stone", "cloud", "maple", "ocean"]
    return [
        {
            "data_source": "guess",
            "prompt": [{"role": "user", "content": f"Say the word {w!r}."}],
            "env_class": env_class,
            "reward_spec": {"method": "rule", "ground_truth": w},
            "extra_info": {"index": i, "split": "train"},
        }
        for i, (w, env_class) in enumerate(zip(words, env_classes, strict=False))
    ]


def _write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project directory: ``guess_pkg/envs.py`` (the env), ``guess_envs.py`` (a module
    that registers it as ``guess-word``), ``broken.py`` (fails at import) and the rows."""
    (tmp_path / "guess_pkg").mkdir()
    (tmp_path / "guess_pkg" / "__init__.py").write_text("")
    (tmp_path / "guess_pkg" / "envs.py").write_text(ENV_MODULE)
    (tmp_path / "guess_envs.py").write_text(REGISTERING_MODULE)
    (tmp_path / "broken.py").write_text("raise RuntimeError('broken on purpose')\n")
    # rows naming the class itself, and one naming no env (the --env's)
    _write_parquet(tmp_path / "rows.parquet", _rows([ENTRY, ENTRY, None, ENTRY]))
    # the same with a row naming the id that guess_envs.py registers
    _write_parquet(tmp_path / "mixed.parquet", _rows([ENTRY, "guess-word", None, "guess-word"]))
    return tmp_path


@pytest.fixture
def in_project(project: Path, monkeypatch: pytest.MonkeyPatch):
    """Run in-process from the project directory; whatever the test registers or imports goes."""
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    before_modules, before_envs = set(sys.modules), set(skyrl_gym.registry)
    yield project
    for env_id in set(skyrl_gym.registry) - before_envs:
        skyrl_gym.deregister(env_id)
    for name in set(sys.modules) - before_modules:
        if name.split(".")[0] in ("guess_pkg", "guess_envs", "broken"):
            del sys.modules[name]


def _skyrl(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    # no PYTHONPATH: the current directory must reach sys.path through skyrl itself
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run(
        [str(SKYRL), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


# --------------------------------------------------------------------------- in process
def test_an_entry_point_id_is_loaded_checked_and_registered(in_project):
    env_spec = skyrl_gym.spec(ENTRY)
    assert env_spec.id == ENTRY and env_spec.source == "entry point"
    assert skyrl_gym.spec(ENTRY) is env_spec  # registered once
    env = skyrl_gym.make(ENTRY, extras={"reward_spec": {"method": "rule", "ground_truth": "apple"}})
    env.init([{"role": "user", "content": "Say 'apple'."}])
    out = env.step("apple")
    assert out["reward"] == 1.0 and out["done"]
    env.close()


@pytest.mark.parametrize(
    ("env_id", "expected"),
    [
        ("guess_pkg.envs:NotAnEnv", "is the class guess_pkg.envs.NotAnEnv, not a BaseTextEnv subclass"),
        ("guess_pkg.envs:helper", "is the function helper, not a BaseTextEnv subclass"),
        ("guess_pkg.envs:Missing", "has no attribute 'Missing'; its env classes: GuessEnv"),
        ("no_such_pkg.envs:Env", "no module named 'no_such_pkg'"),
        ("broken:Env", "importing 'broken' failed: RuntimeError: broken on purpose"),
    ],
)
def test_a_bad_entry_point_is_a_config_error_that_says_what_it_found(in_project, env_id, expected):
    with pytest.raises(ConfigError) as info:
        skyrl_gym.spec(env_id)
    assert expected in str(info.value)
    assert env_id not in skyrl_gym.registry


def test_imports_by_name_and_by_path(in_project):
    from skyrl_gym.user_envs import import_modules

    (module,) = import_modules(["guess_envs"])
    assert module.__name__ == "guess_envs" and skyrl_gym.spec("guess-word").source == "user"
    assert import_modules(["guess_envs"]) == [module]  # imported once: no second registration
    skyrl_gym.deregister("guess-word")
    del sys.modules["guess_envs"]
    (by_path,) = import_modules([str(in_project / "guess_envs.py")])
    assert by_path.__file__ == str(in_project / "guess_envs.py") and "guess-word" in skyrl_gym.registry
    with pytest.raises(ConfigError, match="no module named 'no_such_module'"):
        import_modules(["no_such_module"])
    with pytest.raises(ConfigError, match="no such file"):
        import_modules(["missing/file.py"])
    with pytest.raises(ConfigError, match="RuntimeError: broken on purpose"):
        import_modules(["broken.py"])
    assert "broken" not in sys.modules
    with pytest.raises(ConfigError, match="a list of module names"):
        import_modules("guess_envs")


def test_the_unknown_id_error_names_both_ways(in_project):
    skyrl_gym.register("guess-word", "guess_pkg.envs:GuessEnv")
    with pytest.raises(EnvNotFoundError) as info:
        skyrl_gym.spec("guess-wrod")
    message = str(info.value)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, KeyError)
    assert "no env registered as 'guess-wrod'" in message and "Did you mean 'guess-word'?" in message
    assert "--env package.module:Class" in message and "--import package.module" in message


def test_rows_that_name_an_entry_point_load_and_check(in_project):
    from skyrl_agent.tasks import check_env_ids, load_tasks, with_env_config

    items = load_tasks(str(in_project / "rows.parquet"), default_env_id=ENTRY)
    assert [i.env_id for i in items] == [ENTRY] * 4  # the row without env_class takes --env
    check_env_ids(items)
    assert skyrl_gym.registry[ENTRY].source == "entry point"
    scoped = with_env_config(items[:1], {f"{ENTRY}.max_turns": 3, "shared": 1})
    assert scoped[0].env_config == {"max_turns": 3, "shared": 1}
    with pytest.raises(EnvNotFoundError, match="--import"):
        check_env_ids(load_tasks(str(in_project / "mixed.parquet"), default_env_id=ENTRY))


def test_train_config_records_imports_and_the_flag_is_import(in_project):
    from trainers.config import TrainConfig, config_from_flags

    cfg = config_from_flags(["--env", ENTRY, "--import", "guess_envs", "--import", "guess_pkg/envs.py"])
    assert cfg.data.env == ENTRY and cfg.data.imports == ("guess_envs", "guess_pkg/envs.py")
    assert config_from_flags([]).data.imports == ()
    with pytest.raises(ConfigError, match="--import MODULE"):
        TrainConfig(imports="guess_envs")


def test_the_verbs_in_process(in_project, capsys):
    assert skyrl_main(["envs", "--json", "--import", "guess_envs.py"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["guess-word"]["entry_point"] == ENTRY and rows["guess-word"]["source"] == "user"
    assert rows["guess-word"]["description"] == "Say the secret word; two tries."
    assert skyrl_main(["envs", "--import", "no_such_module"]) == 1
    assert "skyrl envs: error: --import 'no_such_module': no module named" in capsys.readouterr().err
    # rollout and eval look the env up before the model loads: the bundled model is never read
    argv = [
        "--env",
        "guess-wrod",
        "--import",
        "guess_envs",
        "--prompts",
        "rows.parquet",
        "--model",
        "tiny-random",
    ]
    assert skyrl_main(["eval", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("skyrl eval: error: no env registered as 'guess-wrod'. Did you mean 'guess-word'?")
    assert skyrl_main(["rollout", "--env", "guess_pkg.envs:helper", "--out", "o.jsonl", *argv[2:]]) == 1
    assert "is the function helper, not a BaseTextEnv subclass" in capsys.readouterr().err


# --------------------------------------------------------------------------- through the CLI
def test_skyrl_envs_import_lists_the_users_envs(project):
    # the console script puts its own folder on sys.path, not the current directory: skyrl adds it
    done = _skyrl(project, "envs", "--import", "guess_envs")
    assert done.returncode == 0, done.stderr
    assert any(x.startswith("guess-word") and "Say the secret word" in x for x in done.stdout.splitlines())


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--env", "guess-wrod", "--import", "guess_envs"], ["Did you mean 'guess-word'?", "--env package.module:Class", "--import package.module"]),
        (["--env", "guess_pkg.envs:NotAnEnv"], ["is the class guess_pkg.envs.NotAnEnv, not a BaseTextEnv subclass"]),
        (["--env", "no_such_pkg.envs:GuessEnv"], ["no module named 'no_such_pkg'", "run from the directory"]),
        (["--env", ENTRY, "--import", "no_such_module"], ["--import 'no_such_module': no module named"]),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_mistakes_are_one_line_errors_through_the_cli(project, args, expected):
    # rollout and eval resolve the env before the model loads: the bundled model is never read
    done = _skyrl(
        project, "rollout", *args, "--prompts", "rows.parquet", "--out", "out.jsonl", "--model", "tiny-random"
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("skyrl rollout: error: "), done.stderr
    for part in expected:
        assert part in done.stderr, done.stderr
    assert not (project / "out.jsonl").exists()


@pytest.mark.slow
def test_skyrl_train_refuses_a_non_env_before_writing_the_run(project):
    done = _skyrl(
        project, "train", "--env", "guess_pkg.envs:helper", "--data", "rows.parquet", "--run-dir", "run"
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "skyrl train: error: env 'guess_pkg.envs:helper' is the function helper" in done.stderr
    assert not (project / "run").exists()


@pytest.mark.slow
def test_skyrl_eval_runs_an_entry_point_env_on_published_rows(project):
    from skyrl_agent.io import load_jsonl

    done = _skyrl(
        project, "eval", "--env", ENTRY, "--prompts", "rows.parquet", "--model", "tiny-random", "--n", "2",
        "--max-turns", "2", "--max-tokens", "8", "--threads", "1", "--quiet", "--out", "eval.jsonl",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "episodes (masked)  8 (0)" in done.stdout, done.stdout
    trajs = load_jsonl(project / "eval.jsonl")
    assert {t.env_id for t in trajs} == {ENTRY} and not [t for t in trajs if t.masked]


@pytest.mark.slow
def test_skyrl_train_one_step_on_the_users_env(project):
    from skyrl_agent.models import tiny_random_model

    model, tok = tiny_random_model(hidden_size=32, num_layers=1)
    model.save_pretrained(project / "model")
    tok.save_pretrained(project / "model")
    done = _skyrl(
        project, "train", "--env", ENTRY, "--import", "guess_envs", "--data", "mixed.parquet",
        "--eval-data", "rows.parquet", "--model", "model", "--steps", "1", "--max-turns", "2",
        "--max-tokens-per-turn", "8", "--prompts-per-step", "2", "--group-size", "2", "--eval-prompts", "2",
        "--eval-samples", "1", "--train-prompts", "0", "--run-dir", "run", "--no-progress", "--threads", "1",
        "--no-bf16", "--report-to", "none", "--no-skip-equal-reward-groups", "--temperature", "1.0",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = project / "run"
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in records if r["kind"] == "train"]
    assert step["episodes"] == 4 and step["masked"] == 0, step
    assert [r["episodes"] for r in records if r["kind"] == "eval"] == [2, 2]
    config = json.loads((run / "config.json").read_text())
    assert config["data"]["env"] == ENTRY and config["data"]["imports"] == ["guess_envs"]
    trajs = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert {t["env_id"] for t in trajs} <= {ENTRY, "guess-word"} and not [t for t in trajs if t["masked"]]
