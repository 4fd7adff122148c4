import pickle
import subprocess
import sys
import textwrap

import pytest

import skyrl_gym
from skyrl_gym import registration
from skyrl_gym.config import ConfigView, config_get
from skyrl_gym.errors import EnvNotFoundError, RegistrationError
from tests.envs_for_tests import GuessEnv


@pytest.fixture
def clean_id():
    ids = []

    def _use(env_id):
        ids.append(env_id)
        return env_id

    yield _use
    for env_id in ids:
        if env_id in registration.registry:
            skyrl_gym.deregister(env_id)


def test_register_make_with_callable(clean_id):
    skyrl_gym.register(clean_id("guess-test"), GuessEnv, kwargs={"extras": {"target": 3}})
    env = skyrl_gym.make("guess-test")
    assert isinstance(env, GuessEnv)
    assert env.target == 3
    assert env.spec.id == "guess-test"
    # make() kwargs override the spec's kwargs
    assert skyrl_gym.make("guess-test", extras={"target": 9}).target == 9


def test_register_string_entry_point_is_lazy(clean_id):
    skyrl_gym.register(clean_id("guess-lazy"), "tests.envs_for_tests:GuessEnv")
    env_spec = skyrl_gym.spec("guess-lazy")
    assert env_spec.entry_point == "tests.envs_for_tests:GuessEnv"
    env = env_spec.make(extras={"target": 2})
    assert env.target == 2
    assert "Guess a number" in env_spec.summary()


def test_duplicate_id_raises(clean_id):
    skyrl_gym.register(clean_id("guess-dup"), GuessEnv)
    with pytest.raises(RegistrationError, match="already registered"):
        skyrl_gym.register("guess-dup", GuessEnv)


def test_typo_gets_did_you_mean(clean_id):
    skyrl_gym.register(clean_id("guess-number"), GuessEnv)
    with pytest.raises(EnvNotFoundError, match="Did you mean 'guess-number'"):
        skyrl_gym.make("guess-numbr")
    with pytest.raises(KeyError):  # also a KeyError for code that catches that
        skyrl_gym.spec("guess-numbr")


@pytest.mark.parametrize("bad", ["no_colon", "a:b:c", "1mod:Cls", ""])
def test_malformed_entry_point(bad, clean_id):
    with pytest.raises(RegistrationError, match="module:ClassName"):
        skyrl_gym.register(clean_id("bad-ep"), bad)


def test_invalid_id():
    with pytest.raises(RegistrationError, match="invalid env id"):
        skyrl_gym.register("has space", GuessEnv)


def test_unimportable_entry_point_names_module(clean_id):
    skyrl_gym.register(clean_id("ghost"), "no_such_pkg_xyz.mod:Env")
    with pytest.raises(RegistrationError, match="cannot import 'no_such_pkg_xyz.mod'"):
        skyrl_gym.make("ghost")
    skyrl_gym.register(clean_id("ghost2"), "tests.envs_for_tests:NoSuchEnv")
    with pytest.raises(RegistrationError, match="has no attribute 'NoSuchEnv'"):
        skyrl_gym.make("ghost2")


def test_entry_point_must_return_env(clean_id):
    skyrl_gym.register(clean_id("not-env"), lambda **kw: object())
    with pytest.raises(RegistrationError, match="not an Env"):
        skyrl_gym.make("not-env")


def test_deregister(clean_id):
    skyrl_gym.register(clean_id("guess-gone"), GuessEnv)
    skyrl_gym.deregister("guess-gone")
    assert "guess-gone" not in [s.id for s in skyrl_gym.list_envs()]
    with pytest.raises(EnvNotFoundError):
        skyrl_gym.deregister("guess-gone")


def test_plugin_entry_point_group(tmp_path, monkeypatch, clean_id):
    pkg = tmp_path / "plugin_pkg_xyz"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            '''
            from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput

            class PluginEnv(BaseTextEnv):
                """An env that a third-party package adds."""

                def step(self, action):
                    self.turns += 1
                    return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True)
            '''
        )
    )
    dist = tmp_path / "plugin_pkg_xyz-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-pkg-xyz\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[skyrl_gym.envs]\nplugin_env_xyz = plugin_pkg_xyz:PluginEnv\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registration, "_plugins_loaded", False)
    clean_id("plugin_env_xyz")
    assert "plugin_pkg_xyz" not in sys.modules
    env_spec = skyrl_gym.spec("plugin_env_xyz")
    assert env_spec.source == "plugin:plugin-pkg-xyz"
    assert "plugin_pkg_xyz" not in sys.modules  # registered without importing
    env = skyrl_gym.make("plugin_env_xyz")
    assert env.step("x").done is True


def test_dict_env_config_reads_as_attributes(clean_id):
    seen = {}

    class ConfigReader(GuessEnv):
        def __init__(self, env_config, extras=None):
            super().__init__(env_config, extras)
            seen["db_path"] = env_config.db_path
            seen["nested"] = env_config.limits.rows
            seen["item"] = env_config["db_path"]

    skyrl_gym.register(clean_id("cfg-reader"), ConfigReader)
    skyrl_gym.make("cfg-reader", env_config={"db_path": "/data", "limits": {"rows": 50}})
    assert seen == {"db_path": "/data", "nested": 50, "item": "/data"}


def test_omegaconf_env_config_passes_through(clean_id):
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create({"db_path": "/x"})
    skyrl_gym.register(clean_id("cfg-omega"), GuessEnv)
    env = skyrl_gym.make("cfg-omega", env_config=cfg)
    assert env.env_config is cfg
    assert config_get(cfg, "db_path") == "/x"
    assert config_get({"a": 1}, "a") == 1
    assert config_get(None, "a", 5) == 5
    with pytest.raises(KeyError, match="'missing' is required"):
        config_get({}, "missing")


def test_config_view_errors_and_pickles():
    view = ConfigView({"a": 1})
    with pytest.raises(AttributeError, match=r"no key 'b'; keys: \['a'\]"):
        _ = view.b
    assert pickle.loads(pickle.dumps(view)).a == 1


def test_threads_that_race_the_first_plugin_lookup_all_find_the_plugin():
    # a fresh process: the first lookups of a plugin env come from 8 threads at once; each must
    # wait for the plugins to be registered rather than see a half-filled registry
    code = textwrap.dedent(
        """
        import threading
        import skyrl_gym

        errors, barrier = [], threading.Barrier(8)

        def look():
            barrier.wait()
            try:
                skyrl_gym.spec("swe")
                skyrl_gym.spec("harbor")
            except Exception as exc:
                errors.append(repr(exc))

        threads = [threading.Thread(target=look) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(len(errors), errors[:1])
        """
    )
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("0 "), out.stdout
