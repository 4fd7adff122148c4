"""The public import paths of the published skyrl-gym 0.4.0 exist here and name working objects.

The list of paths is the published package's public surface (its ``__init__`` files and the
modules its docs and examples import); each must import and behave, not only exist."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

import skyrl_gym
from skyrl_gym.errors import ConfigError, EnvNotFoundError, RegistrationError, SkyRLError

#: (module, names) that code written for the published package imports.
PUBLISHED_PATHS = [
    (
        "skyrl_gym",
        ["Env", "make", "spec", "register", "registry", "pprint_registry", "envs", "tools", "error"],
    ),
    ("skyrl_gym.core", ["Env"]),
    ("skyrl_gym.error", ["Error", "RegistrationError"]),
    ("skyrl_gym.envs", ["register", "deregister"]),
    (
        "skyrl_gym.envs.registration",
        [
            "EnvSpec",
            "register",
            "deregister",
            "make",
            "spec",
            "registry",
            "pprint_registry",
            "load_env_creator",
        ],
    ),
    ("skyrl_gym.envs.base_text_env", ["BaseTextEnv", "BaseTextEnvStepOutput", "ConversationType"]),
    ("skyrl_gym.metrics", ["default_aggregate_metrics", "aggregate_for_environment"]),
    ("skyrl_gym.envs.sql.env", ["Text2SQLEnvConfig"]),
    ("skyrl_gym.envs.search.env", ["SearchEnvConfig"]),
    ("skyrl_gym.tools.core", ["tool", "ToolGroup"]),
    ("skyrl_gym.tools", ["SQLCodeExecutorToolGroup", "SearchToolGroup", "PythonCodeExecutorToolGroup"]),
    ("skyrl_gym.envs.aime.env", ["AIMEEnv"]),
    ("skyrl_gym.envs.lcb.env", ["LCBEnv"]),
    ("skyrl_gym.envs.searchcode.env", ["SearchCodeEnv"]),
    ("skyrl_gym.envs.rlm.env", ["BaseRLMEnv"]),
]

#: Every env id the published package registers.
PUBLISHED_IDS = ["aime", "gsm8k", "gsm8k_multi_turn", "text2sql", "search", "lcb", "searchcode"]


@pytest.mark.parametrize("env_id", PUBLISHED_IDS)
def test_every_published_env_id_is_registered_with_an_example(env_id):
    env_cls = skyrl_gym.spec(env_id).load()
    example = env_cls.example()
    assert example.prompt, f"{env_id} has no example prompt"
    env = skyrl_gym.make(env_id, env_config=dict(example.env_config), extras=dict(example.extras))
    env.close()


@pytest.mark.parametrize(("module", "names"), PUBLISHED_PATHS, ids=[m for m, _ in PUBLISHED_PATHS])
def test_published_path_imports(module, names):
    mod = importlib.import_module(module)
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module} lacks {missing}"


def test_the_registry_paths_are_one_registry():
    from skyrl_gym.envs import registration as published

    assert published.registry is skyrl_gym.registry
    assert "text2sql" in published.registry and published.registry["text2sql"].id == "text2sql"
    published.register(id="paths_probe", entry_point="skyrl_gym.envs.calculator:CalculatorEnv")
    try:
        assert "paths_probe" in skyrl_gym.registry
        env = skyrl_gym.make("paths_probe", extras={"reward_spec": {"ground_truth": "4"}})
        assert type(env).__name__ == "CalculatorEnv"
    finally:
        from skyrl_gym.envs import deregister

        deregister("paths_probe")
    assert "paths_probe" not in skyrl_gym.registry


def test_load_env_creator_imports_an_entry_point_and_names_bad_ones():
    from skyrl_gym.envs.calculator import CalculatorEnv
    from skyrl_gym.envs.registration import load_env_creator

    assert load_env_creator("skyrl_gym.envs.calculator:CalculatorEnv") is CalculatorEnv
    with pytest.raises(RegistrationError, match="package.module:Class"):
        load_env_creator("no colon here")
    with pytest.raises(RegistrationError, match="has no attribute"):
        load_env_creator("skyrl_gym.envs.calculator:NoSuchEnv")


def test_published_error_root_catches_our_errors():
    from skyrl_gym import error

    assert error.Error is SkyRLError
    assert issubclass(error.RegistrationError, error.Error)
    with pytest.raises(error.Error):
        skyrl_gym.make("no_such_env_anywhere")
    with pytest.raises(error.RegistrationError):
        skyrl_gym.register("calculator", "skyrl_gym.envs.calculator:CalculatorEnv")  # already taken


class _CountingEnv(skyrl_gym.BaseTextEnv):
    """An env whose aggregate is a sum, to tell it from the default mean."""

    def step(self, action):  # pragma: no cover - never stepped
        raise NotImplementedError

    @staticmethod
    def aggregate_metrics(metrics):
        return {"total": sum(m["n"] for m in metrics)}


def test_aggregate_for_environment_calls_the_env_class():
    from skyrl_gym.metrics import aggregate_for_environment, default_aggregate_metrics

    episodes = [{"n": 1, "ok": True, "note": "text"}, {"n": 3, "ok": False}]
    # a built-in env uses the default: a mean over the numeric and bool fields
    assert aggregate_for_environment("calculator", episodes) == {"n": 2.0, "ok": 0.5}
    assert default_aggregate_metrics(episodes) == {"n": 2.0, "ok": 0.5}
    skyrl_gym.register("paths_counting", _CountingEnv)
    try:
        assert aggregate_for_environment("paths_counting", episodes) == {"total": 4}
    finally:
        skyrl_gym.deregister("paths_counting")
    with pytest.raises(EnvNotFoundError, match="Did you mean 'calculator'"):
        aggregate_for_environment("calculater", episodes)


def test_text2sql_env_config_is_the_published_name_and_refuses_unknown_keys():
    from skyrl_gym.envs.sql import load_bundled_rows
    from skyrl_gym.envs.sql.env import Text2SQLEnvConfig

    row = load_bundled_rows("train")[0]
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    env = skyrl_gym.make("text2sql", env_config=Text2SQLEnvConfig(max_turns=2), extras=extras)
    assert env.config.max_turns == 2
    # a typo in a key names the key it meant; a key of another env is refused too
    with pytest.raises(ConfigError, match="Did you mean 'db_path'"):
        skyrl_gym.make("text2sql", env_config={"db_paht": "/data"}, extras=extras)
    with pytest.raises(ConfigError, match="unknown text2sql env_config key 'search_url'"):
        skyrl_gym.make("text2sql", env_config={"search_url": "http://127.0.0.1:8000/retrieve"}, extras=extras)
    with pytest.raises(ConfigError, match="limits key 'max_row'.*Did you mean 'max_rows'"):
        skyrl_gym.make("text2sql", env_config={"limits": {"max_row": 3}}, extras=extras)
    # limits at the top level and nested both still work
    env = skyrl_gym.make("text2sql", env_config={"max_rows": 7, "limits": {"max_chars": 500}}, extras=extras)
    assert env.config.limits.max_rows == 7 and env.config.limits.max_chars == 500


def test_search_env_config_is_the_published_dataclass():
    from skyrl_gym.envs.search.env import SearchEnvConfig
    from skyrl_gym.envs.search.types import SearchConfig

    fields = {f.name: f.default for f in dataclasses.fields(SearchEnvConfig)}
    assert fields == {
        "log_requests": False,
        "search_url": "http://127.0.0.1:8000/retrieve",
        "topk": 3,
        "timeout": 30,
    }
    cfg = SearchConfig.from_env_config(
        SearchEnvConfig(search_url="http://127.0.0.1:9/retrieve", topk=5, timeout=7)
    )
    assert cfg.published and cfg.retriever == "remote" and cfg.topk == 5
    assert cfg.remote is not None and cfg.remote.url == "http://127.0.0.1:9/retrieve"
    assert cfg.remote.timeout_s == 7
